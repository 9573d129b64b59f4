//! What every task stands on, using nothing else of the server: the event bus committed
//! writes are announced on (`events`), supervision and passes on request (`tasks`), the
//! clock every decision reads (`clock`), and rate limits per key (`limit`).

pub mod clock;
pub mod events;
pub mod limit;
pub mod tasks;
