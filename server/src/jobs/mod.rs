//! Jobs inside bookings: what a job may see (`mask`: the device mask and the environment built
//! around it) and how it is started (`launch`: identity, session, logs). `runner` starts jobs when their
//! booking is active and stops them when it ends.

use crate::audit::AuditAction;
use crate::bookings::BookingError;
use crate::store::StoreError;

pub mod container;
pub mod exits;
pub mod keeper;
pub mod launch;
pub mod log_watch;
pub mod mask;
pub mod notice;
pub mod runner;
pub mod session;
pub mod shell;
pub mod shipper;
pub mod wall;

/// `bytes` random bytes in hex: the unguessable part of names a job's files, cgroup and login
/// capture marker are made with.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut random = vec![0u8; bytes];
    getrandom::fill(&mut random).map_err(std::io::Error::other)?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

/// Makes the directory `<jobs_dir>/<prefix>-<random>` (0700, the server's) for one run's files
/// and returns its name: made anew, so a job id that comes back never meets an old run's.
pub fn new_run_dir(jobs_dir: &std::path::Path, prefix: &str) -> std::io::Result<String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(jobs_dir)?;
    let name = format!("{prefix}-{}", random_hex(6)?);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(jobs_dir.join(&name))?;
    Ok(name)
}

/// Gives back the rest of a queue job's booking (it ended before its time limit, or never
/// ran), so its cards are free at once.
pub async fn release_booking_of(
    store: &crate::store::Store,
    booking: i64,
    job: i64,
    now: chrono::DateTime<chrono::Utc>,
) {
    let audit = crate::store::AuditEntry::new(
        None,
        AuditAction::QueueRelease,
        format!("booking {booking}"),
    )
    .detail(format!("job {job} is over"));
    match store.bookings().withdraw(booking, audit, now).await {
        Ok(_) | Err(StoreError::Refused(BookingError::NotFound | BookingError::Invalid { .. })) => {
        }
        Err(e) => tracing::warn!(error = %e, booking, "could not release a queue job's cards"),
    }
}
