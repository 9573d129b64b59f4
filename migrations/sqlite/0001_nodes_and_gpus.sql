-- Nodes and the cards seen on them. A card is identified by (node, uuid); its index is only
-- where the driver enumerated it last.
CREATE TABLE nodes (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL UNIQUE,
    first_seen  TEXT    NOT NULL,
    last_seen   TEXT    NOT NULL
);

CREATE TABLE gpus (
    id                  INTEGER PRIMARY KEY,
    node_id             INTEGER NOT NULL REFERENCES nodes(id),
    uuid                TEXT    NOT NULL,
    idx                 INTEGER NOT NULL,
    name                TEXT    NOT NULL,
    pci_bus_id          TEXT    NOT NULL,
    memory_total_bytes  INTEGER NOT NULL,
    first_seen          TEXT    NOT NULL,
    last_seen           TEXT    NOT NULL,
    UNIQUE (node_id, uuid)
);
