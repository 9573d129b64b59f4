//! Card health: the verdict on each card from its error counters and Xid events (`judge`, no
//! I/O), and the keeper that acts on it on each node (drains a failing card, offers its
//! holders a move, warns admins of a degraded one, puts a card back when a reset reads clean).

pub mod judge;
pub mod keeper;
