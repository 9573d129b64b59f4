//! Jobs inside bookings: what a job may see (`mask`: the device mask and the environment built
//! around it) and how it is started (`launch`: identity, session, logs). `runner` starts jobs when their
//! booking is active and stops them when it ends.

pub mod keeper;
pub mod launch;
pub mod mask;
pub mod runner;
