//! The database file as the server opened it: noticing it vanish or be replaced (a deleted
//! `lanes.db` goes on working for open connections, and everything written after is lost at the
//! next start), and checking its header.
//!
//! The file is never opened and closed again while SQLite has it open: POSIX advisory locks
//! belong to the process, and closing *any* descriptor of the file drops all of them (SQLite's
//! "How To Corrupt", 2.2). Another process (`lanes user add`, `lanes backup`, `sqlite3`) would
//! then think it is the last connection, checkpoint and delete the live `-wal` and `-shm`. The
//! header is read through one descriptor opened once and kept for the life of the process.

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The opened database file: its path and the identity (device, inode) it had then.
#[derive(Debug)]
pub struct DbFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
    /// The descriptor the header is read through (see the module's comment: never closed).
    kept: Arc<File>,
    /// Once gone, gone until a restart: a file put back in its place is not the one open here.
    gone: AtomicBool,
}

/// Descriptors of database files opened in this process, by (device, inode). They stay open
/// until the process ends: closing one would drop SQLite's locks on the same file.
static KEPT: Mutex<Vec<(u64, u64, Arc<File>)>> = Mutex::new(Vec::new());

/// The process's one kept descriptor of the file at `path`, opened on first use.
fn kept_descriptor(path: &Path) -> std::io::Result<(u64, u64, Arc<File>)> {
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let meta = std::fs::metadata(path)?;
    if let Some((dev, ino, file)) = kept
        .iter()
        .find(|(dev, ino, _)| *dev == meta.dev() && *ino == meta.ino())
    {
        return Ok((*dev, *ino, file.clone()));
    }
    let file = Arc::new(File::open(path)?);
    let opened = file.metadata()?;
    kept.push((opened.dev(), opened.ino(), file.clone()));
    Ok((opened.dev(), opened.ino(), file))
}

impl DbFile {
    /// `None` for an in-memory database.
    pub fn watch(path: &Path) -> Option<Self> {
        let (dev, ino, kept) = kept_descriptor(path).ok()?;
        Some(Self {
            path: path.to_path_buf(),
            dev,
            ino,
            kept,
            gone: AtomicBool::new(false),
        })
    }

    /// `Err` with what happened when the file is no longer the one opened.
    pub fn check(&self) -> Result<(), String> {
        let same = !self.gone.load(Ordering::Relaxed)
            && std::fs::metadata(&self.path)
                .is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino);
        if same {
            return Ok(());
        }
        if !self.gone.swap(true, Ordering::Relaxed) {
            tracing::error!(
                path = %self.path.display(),
                "the database file was removed or replaced while Lanes ran; refusing writes \
                 (they would be lost); restore the file and restart Lanes"
            );
        }
        Err(format!(
            "the database file {} was removed or replaced while Lanes ran, so Lanes takes no \
             changes (they would be lost); an operator restores it and restarts Lanes",
            self.path.display()
        ))
    }

    /// `Err` when the file does not start as an SQLite database does.
    pub fn check_header(&self) -> Result<(), String> {
        let mut header = [0u8; 16];
        self.kept
            .read_exact_at(&mut header, 0)
            .map_err(|e| format!("cannot read the database file: {e}"))?;
        if &header == b"SQLite format 3\0" {
            Ok(())
        } else {
            Err(format!(
                "the database file {} is corrupt (its header is not SQLite's)",
                self.path.display()
            ))
        }
    }
}

/// Makes the database files readable by their owner only: created so before SQLite opens them
/// (SQLite gives its -wal and -shm files the database's mode), narrowed with a warning when
/// they already exist with more.
pub fn make_private(db: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if !db.exists() {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(db)?;
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let file = PathBuf::from(format!("{}{suffix}", db.display()));
        let Ok(meta) = std::fs::symlink_metadata(&file) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_file() && mode & 0o077 != 0 {
            tracing::warn!(file = %file.display(), "the database file was readable by others (mode {mode:o}); narrowing it to 600");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}
