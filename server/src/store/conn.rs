//! Where a booking write's statements run: a transaction of the pool (sqlx's `Any` driver, on
//! either backend), or the SQLite writer's own connection (see `writer.rs`). The booking's SQL
//! and its rules are written once, against [`Conn`]; each statement names the kinds of the
//! columns it reads, and a [`Row`] hands them back by position.
//!
//! On the writer's connection every statement finishes before its future is first polled (the
//! connection is synchronous and in this thread), so a write runs there without a runtime:
//! [`run_now`].

use super::sql::{Backend, Tx};
use super::StoreError;

/// A value bound to a statement's `$N`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Arg<'a> {
    Int(Option<i64>),
    Text(Option<&'a str>),
}

impl From<i64> for Arg<'_> {
    fn from(v: i64) -> Self {
        Arg::Int(Some(v))
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(v: Option<i64>) -> Self {
        Arg::Int(v)
    }
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(v: &'a str) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(v: &'a String) -> Self {
        Arg::Text(Some(v))
    }
}

impl<'a> From<Option<&'a String>> for Arg<'a> {
    fn from(v: Option<&'a String>) -> Self {
        Arg::Text(v.map(String::as_str))
    }
}

/// What a column holds, as a statement reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Int,
    Real,
    Text,
}

#[derive(Clone, Debug, PartialEq)]
enum Cell {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
}

/// One row as read, its columns by position.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Row(Vec<Cell>);

impl Row {
    fn cell(&self, i: usize) -> Result<&Cell, StoreError> {
        self.0
            .get(i)
            .ok_or_else(|| StoreError::Database(format!("a row has no column {i}")))
    }

    pub(super) fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.cell(i)? {
            Cell::Int(v) => Ok(*v),
            other => Err(misread(i, "an integer", other)),
        }
    }

    pub(super) fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.opt_int(i)?
            .ok_or_else(|| StoreError::Database(format!("column {i} is NULL")))
    }

    pub(super) fn opt_real(&self, i: usize) -> Result<Option<f64>, StoreError> {
        match self.cell(i)? {
            Cell::Real(v) => Ok(*v),
            other => Err(misread(i, "a number", other)),
        }
    }

    pub(super) fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        match self.cell(i)? {
            Cell::Text(v) => Ok(v.clone()),
            other => Err(misread(i, "a text", other)),
        }
    }

    pub(super) fn text(&self, i: usize) -> Result<String, StoreError> {
        self.opt_text(i)?
            .ok_or_else(|| StoreError::Database(format!("column {i} is NULL")))
    }
}

fn misread(i: usize, wanted: &str, cell: &Cell) -> StoreError {
    StoreError::Database(format!("column {i} read as {wanted} but holds {cell:?}"))
}

/// A connection inside a write transaction.
pub(super) trait Conn {
    fn backend(&self) -> Backend;

    /// The rows `sql` answers with `args` bound to `$1…`, each column read as `kinds` says.
    /// PostgreSQL's refusal of overlapping holds comes back as [`StoreError::Overlap`].
    async fn rows(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        kinds: &[Kind],
    ) -> Result<Vec<Row>, StoreError>;

    /// Runs `sql` for its effect.
    async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<(), StoreError> {
        self.rows(sql, args, &[]).await.map(drop)
    }
}

impl Conn for Tx<'_> {
    fn backend(&self) -> Backend {
        Backend::of(self)
    }

    async fn rows(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        kinds: &[Kind],
    ) -> Result<Vec<Row>, StoreError> {
        use sqlx::Row as _;
        let mut query = sqlx::query(sql);
        for arg in args {
            query = match *arg {
                Arg::Int(v) => query.bind(v),
                Arg::Text(v) => query.bind(v),
            };
        }
        let rows = query
            .fetch_all(&mut **self)
            .await
            .map_err(super::sql::overlap_or)?;
        rows.iter()
            .map(|row| {
                let cells = kinds.iter().enumerate().map(|(i, kind)| {
                    Ok(match kind {
                        Kind::Int => Cell::Int(row.try_get(i)?),
                        Kind::Real => Cell::Real(row.try_get(i)?),
                        Kind::Text => Cell::Text(row.try_get(i)?),
                    })
                });
                cells
                    .collect::<Result<Vec<Cell>, sqlx::Error>>()
                    .map(Row)
                    .map_err(StoreError::from)
            })
            .collect()
    }
}

/// The SQLite writer's connection (see `writer.rs`), inside its transaction.
pub(super) struct Local<'c>(pub(super) &'c rusqlite::Connection);

impl Conn for Local<'_> {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn rows(
        &mut self,
        sql: &str,
        args: &[Arg<'_>],
        kinds: &[Kind],
    ) -> Result<Vec<Row>, StoreError> {
        local_rows(self.0, sql, args, kinds).map_err(|e| StoreError::Database(e.to_string()))
    }
}

fn local_rows(
    conn: &rusqlite::Connection,
    sql: &str,
    args: &[Arg<'_>],
    kinds: &[Kind],
) -> rusqlite::Result<Vec<Row>> {
    let mut statement = conn.prepare_cached(sql)?;
    // `$N` is a named parameter to SQLite, numbered in order of first appearance: bind each
    // by its name, as sqlx's driver does.
    for (n, arg) in args.iter().enumerate() {
        let Some(index) = statement.parameter_index(&format!("${}", n + 1))? else {
            continue;
        };
        match *arg {
            Arg::Int(v) => statement.raw_bind_parameter(index, v)?,
            Arg::Text(v) => statement.raw_bind_parameter(index, v)?,
        }
    }
    let mut rows = statement.raw_query();
    let mut read = Vec::new();
    while let Some(row) = rows.next()? {
        let cells = kinds.iter().enumerate().map(|(i, kind)| {
            Ok(match kind {
                Kind::Int => Cell::Int(row.get(i)?),
                Kind::Real => Cell::Real(row.get(i)?),
                Kind::Text => Cell::Text(row.get(i)?),
            })
        });
        read.push(Row(cells.collect::<rusqlite::Result<Vec<Cell>>>()?));
    }
    Ok(read)
}

/// The outcome of `write`, a future over a [`Local`] connection, which never waits: polled
/// once, it is ready. (One that is not is a mistake in this module's callers, answered as an
/// error rather than a hang.)
pub(super) fn run_now<T>(
    write: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let write = std::pin::pin!(write);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match write.poll(&mut context) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => Err(StoreError::Database(
            "a write on the SQLite writer's connection waited for something".into(),
        )),
    }
}
