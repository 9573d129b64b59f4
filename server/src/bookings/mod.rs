//! Bookings: who holds which cards when. The rules here are plain Rust with no I/O: slot
//! validation and states (`rules`), fairness quotas (`quota`), and choosing cards for an
//! "any N" request (`pick`). The store runs them inside the write transaction that inserts.

pub mod pick;
pub mod quota;
pub mod rules;

pub use lanes_app::model::booking::{Booking, BookingState, GpuRef, Quota, Quotas};
