-- Portal-wide settings admins change at run time, as JSON values by key.
CREATE TABLE settings (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
