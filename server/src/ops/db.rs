//! `lanes db …`, `lanes backup` and `lanes restore`: the operator's database chores, straight
//! against the database, with no server needed. Every refusal is one line and exit status 2.

use crate::audit::AuditAction;
use crate::ops::cli::{BackupArgs, CopyArgs, DbArgs, RestoreArgs};
use crate::ops::data_dir::{prepare_data_dir, resolve_db};
use crate::ops::user::CommandError;
use crate::store::{redact, AuditEntry, Backend, Store, StoreError};
use std::path::{Path, PathBuf};

/// `lanes db status`: one line per migration, then a summary.
pub async fn status(args: DbArgs) -> Result<String, CommandError> {
    let (_, url) = resolve_db(args)?;
    let store = Store::connect_existing(&url).await?;
    let states = store.migration_status().await;
    store.close().await;
    let states = states?;
    let mut out = format!("{} database {}\n", store.backend().name(), redact(&url));
    for m in &states {
        out.push_str(&format!(
            "{:>6} {:<8} {}\n",
            m.version,
            if m.applied { "applied" } else { "pending" },
            m.description
        ));
    }
    let pending = states.iter().filter(|m| !m.applied).count();
    out.push_str(&match pending {
        0 => "up to date\n".to_string(),
        n => format!("{n} pending: `lanes db migrate` (or `lanes serve`) applies them\n"),
    });
    Ok(out)
}

/// `lanes db migrate`.
pub async fn migrate(args: DbArgs) -> Result<String, CommandError> {
    let (data_dir, url) = resolve_db(args)?;
    if Backend::of_url(&url) == Some(Backend::Sqlite) {
        prepare_data_dir(&data_dir)?;
    }
    let store = Store::open(&url).await?;
    let states = store.migration_status().await;
    store.close().await;
    Ok(format!(
        "{} migrations applied; up to date\n",
        states?.iter().filter(|m| m.applied).count()
    ))
}

/// `lanes db copy --from … --to …`: a table of what was copied.
pub async fn copy(args: CopyArgs) -> Result<String, CommandError> {
    if args.from == args.to {
        return Err(CommandError::Invalid(
            "--from and --to name the same database".into(),
        ));
    }
    let source = Store::connect_existing(&args.from).await?;
    let target = match Store::open(&args.to).await {
        Ok(t) => t,
        Err(e) => {
            source.close().await;
            return Err(e.into());
        }
    };
    let audit = AuditEntry::new(None, AuditAction::DatabaseCopy, "database")
        .detail(format!("copied from {}", redact(&args.from)));
    let copied = source.backups().copy_into(&target, &audit).await;
    source.close().await;
    target.close().await;
    let copied = copied?;
    let mut out = format!(
        "copied {} into {} (one transaction; counts and checksums match)\n",
        redact(&args.from),
        redact(&args.to)
    );
    out.push_str(&format!("{:<18} {:>10}  checksum\n", "table", "rows"));
    for t in &copied {
        out.push_str(&format!("{:<18} {:>10}  {}\n", t.table, t.rows, t.checksum));
    }
    Ok(out)
}

/// `lanes backup --to FILE`.
pub async fn backup(args: BackupArgs) -> Result<String, CommandError> {
    let (_, url) = resolve_db(args.db)?;
    let store = Store::connect_existing(&url).await?;
    let done = store.backups().backup_to(&args.to).await;
    store.close().await;
    done?;
    Ok(format!(
        "backed up {} to {}\n",
        redact(&url),
        args.to.display()
    ))
}

/// `lanes restore --from FILE`: checks the backup, then moves a copy of it into place in one
/// rename. A database already there is refused without `--replace`, and with it kept as
/// `lanes.db.before-restore-<time>`.
pub async fn restore(args: RestoreArgs) -> Result<String, CommandError> {
    let (data_dir, url) = resolve_db(args.db)?;
    let Some(Backend::Sqlite) = Backend::of_url(&url) else {
        return Err(CommandError::Invalid(
            "lanes restore puts an SQLite backup in place; for PostgreSQL use pg_restore, or \
             `lanes db copy --from sqlite://BACKUP --to postgres://…`"
                .into(),
        ));
    };
    let path = crate::store::sqlite_file(&url)
        .map_err(|e| CommandError::Invalid(format!("bad database URL: {e}")))?
        .ok_or_else(|| {
            CommandError::Invalid("an in-memory database has nothing to restore".into())
        })?;
    let backup = args
        .from
        .to_str()
        .ok_or_else(|| CommandError::Invalid("the backup path is not UTF-8".into()))?;
    if !args.from.is_file() {
        return Err(CommandError::Invalid(format!(
            "{} is not a file",
            args.from.display()
        )));
    }
    // The backup must be a whole Lanes database this version can serve.
    let check = async {
        let copy = Store::connect_existing(&format!("sqlite://{backup}?mode=ro")).await?;
        let verdict = async {
            copy.backups().integrity().await?;
            let pending = copy.migration_status().await?;
            if pending.iter().all(|m| !m.applied) {
                return Err(StoreError::Invalid(format!(
                    "{backup} is not a Lanes database"
                )));
            }
            Ok(())
        }
        .await;
        copy.close().await;
        verdict
    };
    check.await.map_err(|e| {
        CommandError::Invalid(format!("{backup} is not a usable Lanes backup: {e}"))
    })?;
    let exists = path.exists();
    if exists && !args.replace {
        return Err(CommandError::Invalid(format!(
            "{} exists; pass --replace to put the backup in its place (stop lanes serve first)",
            path.display()
        )));
    }
    prepare_data_dir(&data_dir)?;
    let failed = |e: std::io::Error| CommandError::Failed(format!("cannot restore: {e}"));
    let staged = with_suffix(&path, ".restoring");
    std::fs::copy(&args.from, &staged).map_err(failed)?;
    crate::store::make_private(&staged).map_err(failed)?;
    std::fs::File::open(&staged)
        .and_then(|f| f.sync_all())
        .map_err(failed)?;
    let mut kept = None;
    if exists {
        let old = with_suffix(
            &path,
            &format!(
                ".before-restore-{}",
                chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
            ),
        );
        std::fs::rename(&path, &old).map_err(failed)?;
        // The old database's write-ahead log belongs to it, not to the restored one.
        for suffix in ["-wal", "-shm"] {
            let _ = std::fs::rename(with_suffix(&path, suffix), with_suffix(&old, suffix));
        }
        kept = Some(old);
    }
    std::fs::rename(&staged, &path).map_err(failed)?;
    let audit = AuditEntry::new(None, AuditAction::DatabaseRestore, "database")
        .detail(format!("restored from {}", args.from.display()));
    let restored = Store::connect_existing(&url).await?;
    let audited = restored
        .audit_log()
        .record(&audit, chrono::Utc::now())
        .await;
    restored.close().await;
    audited?;
    Ok(match kept {
        Some(old) => format!(
            "restored {} to {} (the database it replaced is {})\n",
            args.from.display(),
            path.display(),
            old.display()
        ),
        None => format!("restored {} to {}\n", args.from.display(), path.display()),
    })
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", path.display()))
}
