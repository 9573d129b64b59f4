//! Where a server keeps its files: the data dir (resolved from flags, environment and defaults,
//! created private, refused when others could write in it) and the database URL in it. Used by
//! `lanes serve` and by `lanes user add`, which works on the same files without a server.

use crate::ops::cli::DbArgs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("data dir {path} is not usable: {reason}")]
    Unusable { path: PathBuf, reason: String },
    #[error("no data dir given and no home directory to default to: pass --data-dir or set LANES_DATA_DIR")]
    NoDataDir,
}

/// The data dir and database URL from flags, environment and defaults.
pub fn resolve_db(db: DbArgs) -> Result<(PathBuf, String), DataDirError> {
    let data_dir = match db.data_dir {
        Some(dir) => dir,
        None => default_data_dir().ok_or(DataDirError::NoDataDir)?,
    };
    let database_url = db
        .database_url
        .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("lanes.db").display()));
    Ok((data_dir, database_url))
}

fn default_data_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(base.join("lanes"))
}

/// Creates the data dir if needed and proves it writable. Returns whether it was created, so
/// that a start that fails later can leave the file system as it found it.
pub fn prepare_data_dir(path: &Path) -> Result<bool, DataDirError> {
    let fail = |e: std::io::Error| DataDirError::Unusable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let created = !path.exists();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(fail)?;
    if let Err(reason) = secure_dir(path) {
        if created {
            let _ = std::fs::remove_dir(path);
        }
        return Err(DataDirError::Unusable {
            path: path.to_path_buf(),
            reason,
        });
    }
    let probe = path.join(format!(".lanes-write-test-{}", std::process::id()));
    let probed = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe));
    if let Err(e) = probed {
        if created {
            let _ = std::fs::remove_dir(path);
        }
        return Err(fail(e));
    }
    Ok(created)
}

/// Refuses a data dir that someone else could plant files in (links to `/etc/shadow` where
/// job logs go, a database of their making): it must be a real directory, owned by the server's
/// user, not writable by group or others. Readable by others it may have been; it is narrowed
/// to 0700 with a warning.
pub fn secure_dir(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("it is not a directory (a link to one is not taken either)".into());
    }
    let me = nix::unistd::Uid::effective().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "it belongs to uid {}, not to the server's user (uid {me}); chown it",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "others may write in it (mode {mode:o}); chmod 700 it"
        ));
    }
    if mode & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "the data dir was readable by others (mode {mode:o}); narrowing it to 700");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A lock that says "a server runs on this": held (flock, exclusive) on a file beside what it
/// guards for as long as the server runs; the kernel drops it when the process ends, however
/// it ends, so a crash never leaves a stale lock behind. The file holds the holder's process
/// id (for the refusal's message) and its instance id: the next holder knows which process it
/// followed, and that it is gone.
#[derive(Debug)]
pub struct ServeLock {
    held: nix::fcntl::Flock<std::fs::File>,
    path: PathBuf,
    /// Whether taking the lock made the file (a start that fails removes it again).
    created: bool,
    /// The instance id of the process that held it last, if it wrote one.
    pub previous: Option<String>,
}

/// Another server holds a [`ServeLock`].
#[derive(Debug, thiserror::Error)]
pub enum ServeLockError {
    #[error(
        "another Lanes server{holder} already serves {what}; stop it first (two servers on one \
         {what_short} would stop each other's jobs and overwrite each other's state)"
    )]
    Busy {
        what: String,
        what_short: &'static str,
        holder: String,
    },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ServeLock {
    /// Takes the lock in `file`, describing what it guards as `what` (`what_short` in a word),
    /// stamped with this process's `instance` id.
    pub fn take(
        file: &Path,
        what: String,
        what_short: &'static str,
        instance: &str,
    ) -> Result<Self, ServeLockError> {
        use std::io::{Read, Seek, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let io = |source| ServeLockError::Io {
            path: file.to_path_buf(),
            source,
        };
        let created = !file.exists();
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(file)
            .map_err(io)?;
        match nix::fcntl::Flock::lock(opened, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(mut held) => {
                let mut before = String::new();
                let _ = held.read_to_string(&mut before);
                let previous = before.split_whitespace().nth(1).map(str::to_string);
                held.set_len(0).map_err(io)?;
                held.rewind().map_err(io)?;
                held.write_all(format!("{} {instance}\n", std::process::id()).as_bytes())
                    .map_err(io)?;
                Ok(Self {
                    held,
                    path: file.to_path_buf(),
                    created,
                    previous,
                })
            }
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut stamp = String::new();
                let _ = file.read_to_string(&mut stamp);
                let pid = stamp.split_whitespace().next().unwrap_or("");
                Err(ServeLockError::Busy {
                    what,
                    what_short,
                    holder: if pid.chars().all(|c| c.is_ascii_digit()) && !pid.is_empty() {
                        format!(" (process {pid})")
                    } else {
                        String::new()
                    },
                })
            }
            Err((_, errno)) => Err(io(std::io::Error::from(errno))),
        }
    }
}

impl ServeLock {
    /// Lets the lock go, removing its file if taking it made the file: a start that fails
    /// leaves the file system as it found it.
    pub fn discard(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
        drop(self.held);
    }
}

#[cfg(test)]
mod lock_tests {
    use super::*;

    #[test]
    fn a_second_server_lock_on_the_same_file_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("serve.lock");
        let first = ServeLock::take(&file, "data dir X".into(), "data dir", "aaaa").unwrap();
        assert_eq!(first.previous, None);
        let refused = ServeLock::take(&file, "data dir X".into(), "data dir", "bbbb").unwrap_err();
        let message = refused.to_string();
        assert!(
            message.contains(&format!("process {}", std::process::id())),
            "{message}"
        );
        assert!(message.contains("already serves data dir X"), "{message}");
        drop(first);
        let next =
            ServeLock::take(&file, "data dir X".into(), "data dir", "cccc").expect("free again");
        assert_eq!(
            next.previous.as_deref(),
            Some("aaaa"),
            "the process it followed"
        );
    }
}
