//! Moving a lab between databases (`lanes db copy`), and SQLite's online backup
//! (`lanes backup`): every table, value for value, in one transaction on the target, checked
//! by row counts and a checksum per table before it commits.

use super::sql::placeholders;
use super::{Backend, Store, StoreError};
use futures::TryStreamExt;
use sha2::{Digest, Sha256};
use sqlx::any::{AnyRow, AnyTypeInfoKind};
use sqlx::{Row, ValueRef};

repository!(
    /// The database as a whole: copies between databases, backups, vacuum, integrity.
    Backups, backups
);

/// Every table of the schema, parents before children (so that foreign keys hold as rows
/// arrive), with the column that identity sequences follow on PostgreSQL.
pub const TABLES: [(&str, Option<&str>); 34] = [
    ("nodes", Some("id")),
    ("gpus", Some("id")),
    ("users", Some("id")),
    ("groups", Some("id")),
    ("group_members", None),
    ("audit_log", Some("id")),
    ("sessions", None),
    ("api_tokens", Some("id")),
    ("settings", None),
    ("bookings", Some("id")),
    ("booking_gpus", None),
    ("maintenance", Some("id")),
    ("maintenance_gpus", None),
    ("quotas", None),
    ("jobs", Some("id")),
    ("job_log_chunks", None),
    ("violations", Some("id")),
    ("samples_raw", None),
    ("samples_blocks", None),
    ("samples_1m", None),
    ("samples_10m", None),
    ("samples_1h", None),
    ("history_progress", None),
    ("energy_1m", None),
    ("process_use_1m", None),
    ("login_attempts", Some("id")),
    ("notify_prefs", None),
    ("outbox", Some("id")),
    ("action_links", Some("id")),
    ("delivery_attempts", None),
    ("sign_in_flows", None),
    ("terminal_codes", None),
    ("card_health", None),
    ("health_changes", Some("id")),
];

/// Rows inserted per statement: well under both backends' limits on bound values.
const BATCH_VALUES: usize = 20_000;

/// What was copied of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableCopy {
    pub table: &'static str,
    pub rows: u64,
    /// Order-independent digest of every row's values (hex), equal on both sides.
    pub checksum: String,
}

/// One stored value, as both backends can hold it.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    /// Every value of a row, in column order.
    fn row(row: &AnyRow) -> Result<Vec<Self>, StoreError> {
        (0..row.len()).map(|i| Value::read(row, i)).collect()
    }

    fn read(row: &AnyRow, i: usize) -> Result<Self, StoreError> {
        let raw = row.try_get_raw(i)?;
        if raw.is_null() {
            return Ok(Value::Null);
        }
        let kind = raw.type_info().kind();
        Ok(match kind {
            AnyTypeInfoKind::Bool => Value::Int(i64::from(row.try_get::<bool, _>(i)?)),
            AnyTypeInfoKind::SmallInt | AnyTypeInfoKind::Integer | AnyTypeInfoKind::BigInt => {
                Value::Int(row.try_get(i)?)
            }
            AnyTypeInfoKind::Real | AnyTypeInfoKind::Double => Value::Real(row.try_get(i)?),
            AnyTypeInfoKind::Text => Value::Text(row.try_get(i)?),
            AnyTypeInfoKind::Blob => Value::Blob(row.try_get(i)?),
            AnyTypeInfoKind::Null => Value::Null,
        })
    }

    /// Feeds the value to a row digest, tagged so that no two values run together. A real
    /// holding a whole number digests as that integer: SQLite may give back 40 for a 40.0 it
    /// stored, PostgreSQL 40.0 for a 40 bound to a double column.
    fn digest(&self, h: &mut Sha256) {
        match self {
            Value::Null => h.update([0]),
            Value::Int(i) => {
                h.update([1]);
                h.update(i.to_le_bytes());
            }
            Value::Real(r) if r.fract() == 0.0 && r.abs() < 9.0e15 => {
                h.update([1]);
                h.update((*r as i64).to_le_bytes());
            }
            Value::Real(r) => {
                h.update([2]);
                h.update(r.to_le_bytes());
            }
            Value::Text(t) => {
                h.update([3]);
                h.update((t.len() as u64).to_le_bytes());
                h.update(t.as_bytes());
            }
            Value::Blob(b) => {
                h.update([4]);
                h.update((b.len() as u64).to_le_bytes());
                h.update(b);
            }
        }
    }
}

/// A multiset digest: the wrapping sum of each row's SHA-256 (first 16 bytes), so that the
/// order rows come back in (collations differ between backends) does not matter.
#[derive(Default)]
struct TableDigest {
    rows: u64,
    sum: u128,
}

impl TableDigest {
    fn add(&mut self, values: &[Value]) {
        let mut h = Sha256::new();
        for v in values {
            v.digest(&mut h);
        }
        let bytes = h.finalize();
        let mut head = [0u8; 16];
        head.copy_from_slice(&bytes[..16]);
        self.rows += 1;
        self.sum = self.sum.wrapping_add(u128::from_le_bytes(head));
    }

    fn hex(&self) -> String {
        format!("{:032x}", self.sum)
    }
}

impl Backups<'_> {
    /// Tables of this database (other than sqlx's own bookkeeping).
    async fn table_names(&self) -> Result<Vec<String>, StoreError> {
        let sql = match self.backend {
            Backend::Sqlite => {
                "SELECT name FROM sqlite_master WHERE type = 'table'
                 AND name NOT LIKE 'sqlite_%' AND name != '_sqlx_migrations'"
            }
            Backend::Postgres => {
                "SELECT CAST(table_name AS TEXT) FROM information_schema.tables
                 WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
                   AND table_name != '_sqlx_migrations'"
            }
        };
        Ok(sqlx::query_scalar(sql).fetch_all(&self.pool).await?)
    }

    /// The columns of `table`, in order.
    async fn columns(&self, table: &str) -> Result<Vec<String>, StoreError> {
        Ok(match self.backend {
            Backend::Sqlite => {
                sqlx::query_scalar("SELECT name FROM pragma_table_info($1) ORDER BY cid")
                    .bind(table)
                    .fetch_all(&self.pool)
                    .await?
            }
            Backend::Postgres => {
                sqlx::query_scalar(
                    "SELECT CAST(column_name AS TEXT) FROM information_schema.columns
                     WHERE table_schema = current_schema() AND table_name = $1
                     ORDER BY ordinal_position",
                )
                .bind(table)
                .fetch_all(&self.pool)
                .await?
            }
        })
    }

    /// Whether every table of the schema is empty.
    async fn is_empty(&self) -> Result<Option<&'static str>, StoreError> {
        for (table, _) in TABLES {
            let any: Option<i64> = sqlx::query_scalar(&format!("SELECT 1 FROM {table} LIMIT 1"))
                .fetch_optional(&self.pool)
                .await?;
            if any.is_some() {
                return Ok(Some(table));
            }
        }
        Ok(None)
    }

    /// Copies everything in `self` into `target` (a database with this schema and no rows) in
    /// one transaction on the target; reads the source in one snapshot. Each table's rows are
    /// counted and digested on both sides; any difference rolls the whole copy back.
    pub async fn copy_into(
        &self,
        target: &Store,
        audit: &super::AuditEntry,
    ) -> Result<Vec<TableCopy>, StoreError> {
        let pending = |s: Vec<super::MigrationState>| s.iter().any(|m| !m.applied);
        if pending(self.migration_status().await?) {
            return Err(StoreError::Invalid(
                "the source database lacks migrations of this Lanes: run `lanes db migrate` \
                 on it first"
                    .into(),
            ));
        }
        let mut known: Vec<&str> = TABLES.iter().map(|(t, _)| *t).collect();
        known.sort_unstable();
        for (store, side) in [(self.store, "source"), (target, "target")] {
            let mut tables = store.backups().table_names().await?;
            tables.sort_unstable();
            if tables != known {
                return Err(StoreError::Invalid(format!(
                    "the {side} database has tables {tables:?}; this Lanes copies {known:?}"
                )));
            }
        }
        if let Some(table) = target.backups().is_empty().await? {
            return Err(StoreError::Invalid(format!(
                "the target database is not empty (table {table} has rows): copy only into a \
                 new database"
            )));
        }
        let mut source = self.begin_snapshot().await?;
        let mut tx = target.pool.begin().await?;
        if target.backend == Backend::Sqlite {
            // Rows arrive parents first, but a self-reference (none today) would not; checked
            // at commit either way.
            sqlx::query("PRAGMA defer_foreign_keys = ON")
                .execute(&mut *tx)
                .await?;
        }
        let mut report = Vec::new();
        for (table, identity) in TABLES {
            let columns = self.columns(table).await?;
            if target.backups().columns(table).await? != columns {
                return Err(StoreError::Invalid(format!(
                    "table {table} has other columns in the target"
                )));
            }
            let list = columns.join(", ");
            let select = format!("SELECT {list} FROM {table}");
            let mut copied = TableDigest::default();
            let mut batch: Vec<Vec<Value>> = Vec::new();
            let per_batch = (BATCH_VALUES / columns.len().max(1)).max(1);
            {
                let mut rows = sqlx::query(&select).fetch(&mut *source);
                while let Some(row) = rows.try_next().await? {
                    let values = Value::row(&row)?;
                    copied.add(&values);
                    batch.push(values);
                    if batch.len() == per_batch {
                        insert_rows(&mut tx, table, &list, &std::mem::take(&mut batch)).await?;
                    }
                }
            }
            insert_rows(&mut tx, table, &list, &batch).await?;
            // Read back inside the transaction: what will commit is what was read.
            let mut landed = TableDigest::default();
            {
                let mut rows = sqlx::query(&select).fetch(&mut *tx);
                while let Some(row) = rows.try_next().await? {
                    landed.add(&Value::row(&row)?);
                }
            }
            if (landed.rows, landed.sum) != (copied.rows, copied.sum) {
                return Err(StoreError::Database(format!(
                    "table {table}: {} rows with checksum {} read, {} rows with checksum {} \
                     written; nothing was copied",
                    copied.rows,
                    copied.hex(),
                    landed.rows,
                    landed.hex()
                )));
            }
            if let (Backend::Postgres, Some(column)) = (target.backend, identity) {
                // New rows continue after the copied ids.
                sqlx::query(&format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', '{column}'),
                                   COALESCE(MAX({column}), 0) + 1, false) FROM {table}"
                ))
                .execute(&mut *tx)
                .await?;
            }
            report.push(TableCopy {
                table,
                rows: copied.rows,
                checksum: copied.hex(),
            });
        }
        let rows: u64 = report.iter().map(|t| t.rows).sum();
        let audit = audit.clone().detail(format!(
            "{}; {rows} rows in {} tables",
            audit.detail,
            report.len()
        ));
        super::insert_audit(&mut tx, &audit, chrono::Utc::now()).await?;
        tx.commit().await?;
        source.rollback().await?;
        Ok(report)
    }

    /// Writes a consistent copy of this SQLite database to `path` while it serves (one read
    /// snapshot, `VACUUM INTO`), then checks the copy's integrity.
    pub async fn backup_to(&self, path: &std::path::Path) -> Result<(), StoreError> {
        if self.backend != Backend::Sqlite {
            return Err(StoreError::Invalid(
                "lanes backup is for SQLite; back PostgreSQL up with pg_dump (see the README)"
                    .into(),
            ));
        }
        if path.exists() {
            return Err(StoreError::Invalid(format!(
                "{} exists; a backup never overwrites a file",
                path.display()
            )));
        }
        let target = path.to_str().ok_or_else(|| {
            StoreError::Invalid(format!("{} is not a UTF-8 path", path.display()))
        })?;
        sqlx::query("VACUUM INTO $1")
            .bind(target)
            .execute(&self.pool)
            .await?;
        super::file::make_private(path)
            .map_err(|e| StoreError::Database(format!("cannot make the backup private: {e}")))?;
        let copy = Store::connect(&format!("sqlite://{target}")).await?;
        let verdict = copy.backups().integrity().await;
        copy.close().await;
        verdict
    }

    /// PostgreSQL: `VACUUM ANALYZE` of the history tables, for benchmarks on a server whose
    /// autovacuum is off; SQLite needs none.
    pub async fn vacuum(&self) -> Result<(), StoreError> {
        if self.backend == Backend::Postgres {
            sqlx::raw_sql(
                "VACUUM ANALYZE samples_raw, samples_blocks, samples_1m, samples_10m, samples_1h, gpus",
            )
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// PostgreSQL: the size of this database on disk, tables, indexes and TOAST.
    pub async fn bytes(&self) -> Result<u64, StoreError> {
        let bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
            .fetch_one(&self.pool)
            .await?;
        Ok(bytes.max(0) as u64)
    }

    /// SQLite's own check of every page and index; the first problem when there is one.
    pub async fn integrity(&self) -> Result<(), StoreError> {
        if self.backend != Backend::Sqlite {
            return Ok(());
        }
        let verdict: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&self.pool)
            .await?;
        if verdict == "ok" {
            Ok(())
        } else {
            Err(StoreError::Database(format!(
                "the database is damaged: {verdict}"
            )))
        }
    }
}

async fn insert_rows(
    tx: &mut super::sql::Tx<'_>,
    table: &str,
    list: &str,
    rows: &[Vec<Value>],
) -> Result<(), StoreError> {
    let Some(width) = rows.first().map(Vec::len) else {
        return Ok(());
    };
    let tuples: Vec<String> = (0..rows.len())
        .map(|r| format!("({})", placeholders(r * width + 1, width)))
        .collect();
    let sql = format!("INSERT INTO {table} ({list}) VALUES {}", tuples.join(", "));
    let mut query = sqlx::query(&sql);
    for value in rows.iter().flatten() {
        query = match value {
            // A NULL typed bigint: PostgreSQL casts it to any column type on assignment.
            Value::Null => query.bind(Option::<i64>::None),
            Value::Int(i) => query.bind(*i),
            Value::Real(r) => query.bind(*r),
            Value::Text(t) => query.bind(t.clone()),
            Value::Blob(b) => query.bind(b.clone()),
        };
    }
    query.execute(&mut **tx).await?;
    Ok(())
}
