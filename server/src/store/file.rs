//! The database file as the server opened it: noticing it vanish or be replaced (a deleted
//! `lanes.db` goes on working for open connections, and everything written after is lost at the
//! next start), and checking its header.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The opened database file: its path and the identity (device, inode) it had then.
#[derive(Debug)]
pub struct DbFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
    /// Once gone, gone until a restart: a file put back in its place is not the one open here.
    gone: AtomicBool,
}

impl DbFile {
    /// `None` for an in-memory database.
    pub fn watch(path: &Path) -> Option<Self> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
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
        use std::io::Read;
        let mut header = [0u8; 16];
        std::fs::File::open(&self.path)
            .and_then(|mut f| f.read_exact(&mut header))
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
