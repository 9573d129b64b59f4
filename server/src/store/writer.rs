//! SQLite's booking writer: one thread that owns its own connection to the database file and
//! runs each booking write whole in it, with group commit.
//!
//! sqlx's SQLite driver runs every statement on a worker thread of its connection, so a
//! booking's transaction (begin, the cards' check, the quota rows, the insert, commit) is a
//! hand-off between threads per statement, and those hand-offs, not SQLite, were most of a
//! booking's cost. Here the caller hands the whole write over once: the writer takes the
//! writes waiting at that moment, runs them one after another in one `BEGIN IMMEDIATE`, each
//! inside its own `SAVEPOINT` (so each one's checks see the ones before it, exactly as if they
//! had come one at a time, and a refused one rolls back only its own statements), commits once,
//! and only then answers each caller. A write whose batch failed to commit is answered with
//! that failure: nothing of it was kept.
//!
//! The writer takes the store's write turn for each batch, as the pool's booking writes do, so
//! in this process they queue behind each other rather than sleep on SQLite's lock; other
//! processes (`lanes user add`) meet `BEGIN IMMEDIATE` and the busy timeout, as before.
//!
//! The thread starts with the first write and ends when the store is closed (after finishing
//! the writes already handed over) or dropped.

use super::conn::Local;
use super::file::DbFile;
use super::StoreError;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};

/// Most writes one transaction takes: enough to share a commit among every client of a busy
/// portal, few enough that one batch never holds the write lock for long.
const MAX_BATCH: usize = 64;

/// What a write left once its statements ran: whether to keep them, and how to answer its
/// caller once the batch's commit is known (`Err`: it failed, and nothing was kept).
struct Done {
    keep: bool,
    answer: Answer,
}

type Answer = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

/// A write handed to the writer; called with `None` when its batch failed before its turn.
type Job = Box<dyn FnOnce(Option<&rusqlite::Connection>) -> Done + Send>;

#[derive(Debug)]
pub(super) struct Writer {
    path: PathBuf,
    /// The store's write turn (see `Store::writer`).
    turn: Arc<tokio::sync::Mutex<()>>,
    file: Option<Arc<DbFile>>,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    Idle,
    Running {
        jobs: mpsc::Sender<Job>,
        /// Closed when the thread has ended.
        ended: tokio::sync::oneshot::Receiver<()>,
    },
    Closed,
}

impl Writer {
    pub(super) fn new(
        path: PathBuf,
        turn: Arc<tokio::sync::Mutex<()>>,
        file: Option<Arc<DbFile>>,
    ) -> Self {
        Self {
            path,
            turn,
            file,
            state: Mutex::new(State::Idle),
        }
    }

    /// Runs `write` on the writer's connection inside a transaction, and answers once that is
    /// committed. An `Err` from `write` undoes its statements (and only its).
    pub(super) async fn write<T: Send + 'static>(
        &self,
        write: impl FnOnce(&mut Local<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn| {
            // Not run (`None`) when its batch failed before its turn.
            let result = conn.map(|conn| {
                std::panic::catch_unwind(AssertUnwindSafe(|| write(&mut Local(conn))))
                    .unwrap_or_else(|_| {
                        Err(StoreError::Database(
                            "a booking write failed unexpectedly (see the server's log)".into(),
                        ))
                    })
            });
            Done {
                keep: matches!(result, Some(Ok(_))),
                answer: Box::new(move |committed| {
                    let _ = answer.send(match (result, committed) {
                        (Some(Err(refused)), _) => Err(refused),
                        (Some(Ok(value)), Ok(())) => Ok(value),
                        (_, Err(e)) => Err(again(e)),
                        (None, Ok(())) => {
                            Err(StoreError::Database("a booking write was not run".into()))
                        }
                    });
                }),
            }
        });
        self.send(job)?;
        answered.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the database's writer stopped".into(),
            ))
        })
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*state, State::Idle) {
            let (jobs, queue) = mpsc::channel();
            let (end, ended) = tokio::sync::oneshot::channel::<()>();
            let (path, turn, file) = (self.path.clone(), self.turn.clone(), self.file.clone());
            std::thread::Builder::new()
                .name("lanes-sqlite-writer".into())
                .spawn(move || {
                    serve(&path, &queue, &turn, file.as_deref());
                    drop(end);
                })
                .map_err(|e| StoreError::Unavailable(format!("cannot start the writer: {e}")))?;
            *state = State::Running { jobs, ended };
        }
        match &*state {
            State::Running { jobs, .. } => jobs
                .send(job)
                .map_err(|_| StoreError::Unavailable("the database's writer stopped".into())),
            _ => Err(StoreError::Unavailable("the database is closed".into())),
        }
    }

    /// Lets the writes already handed over finish, then ends the thread (closing its
    /// connection). Later writes are refused.
    pub(super) async fn close(&self) {
        let state = std::mem::replace(
            &mut *self.state.lock().unwrap_or_else(|e| e.into_inner()),
            State::Closed,
        );
        if let State::Running { jobs, ended } = state {
            drop(jobs);
            let _ = ended.await;
        }
    }
}

/// The same failure for each write of a batch.
fn again(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
        e => StoreError::Database(e.to_string()),
    }
}

/// The writer thread: a batch at a time, until every sender is gone.
fn serve(
    path: &std::path::Path,
    queue: &mpsc::Receiver<Job>,
    turn: &tokio::sync::Mutex<()>,
    file: Option<&DbFile>,
) {
    let mut conn: Option<rusqlite::Connection> = None;
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let db = match conn {
            Some(ref db) => db,
            None => match open(path) {
                Ok(opened) => conn.insert(opened),
                Err(e) => {
                    let e = StoreError::Unavailable(format!(
                        "cannot open the database for writing: {e}"
                    ));
                    tracing::warn!(error = %e, "the SQLite writer cannot open the database");
                    for job in batch {
                        (job(None).answer)(Err(&e));
                    }
                    continue;
                }
            },
        };
        let _turn = turn.blocking_lock();
        let (done, outcome) = run_batch(db, batch, file);
        drop(_turn);
        for d in done {
            (d.answer)(outcome.as_ref().map(|_| ()));
        }
    }
}

/// Runs `batch` in one transaction: each write in its own savepoint, one commit for all.
fn run_batch(
    conn: &rusqlite::Connection,
    batch: Vec<Job>,
    file: Option<&DbFile>,
) -> (Vec<Done>, Result<(), StoreError>) {
    let failed = |e: rusqlite::Error| StoreError::Database(e.to_string());
    if let Some(Err(gone)) = file.map(DbFile::check) {
        let done = batch.into_iter().map(|job| job(None)).collect();
        return (done, Err(StoreError::Unavailable(gone)));
    }
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let done = batch.into_iter().map(|job| job(None)).collect();
        return (done, Err(failed(e)));
    }
    let mut done = Vec::with_capacity(batch.len());
    let mut outcome = Ok(());
    for job in batch {
        if outcome.is_err() {
            done.push(job(None));
            continue;
        }
        if let Err(e) = conn.execute_batch("SAVEPOINT booking") {
            outcome = Err(failed(e));
            done.push(job(None));
            continue;
        }
        let d = job(Some(conn));
        let end = if d.keep {
            "RELEASE booking"
        } else {
            "ROLLBACK TO booking; RELEASE booking"
        };
        if let Err(e) = conn.execute_batch(end) {
            outcome = Err(failed(e));
        }
        done.push(d);
    }
    if outcome.is_ok() {
        outcome = conn.execute_batch("COMMIT").map_err(failed);
    }
    if outcome.is_err() && !conn.is_autocommit() {
        // Nothing of this batch is kept; the connection is ready for the next.
        let _ = conn.execute_batch("ROLLBACK");
    }
    (done, outcome)
}

/// The writer's connection: the same settings as the pool's (see `open.rs`), and room for
/// the booking's statements in its cache.
fn open(path: &std::path::Path) -> rusqlite::Result<rusqlite::Connection> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}
