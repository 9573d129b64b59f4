//! Jobs inside bookings: what a job may see (`mask`: the device mask and the environment built
//! around it) and how it is started (`launch`: identity, session, logs). The scheduling of jobs
//! onto slots, their records and the API come with the rest of the enforcement work.

pub mod launch;
pub mod mask;
