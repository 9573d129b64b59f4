//! What every task stands on, using nothing else of the server: the event bus committed
//! writes are announced on (`events`), supervision and passes on request (`tasks`), and the
//! clock every decision reads (`clock`).

pub mod clock;
pub mod events;
pub mod tasks;
