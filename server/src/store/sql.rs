//! What the two backends share and where they differ: one SQL text for both (sqlx's `Any`
//! driver, `$N` placeholders, which SQLite also reads), timestamps as the same RFC 3339 text in
//! both, and the few spellings that differ, named once here.
//!
//! Both schemas keep the same column types (integers as 64-bit, flags as 0/1 integers, times as
//! Unix milliseconds or RFC 3339 text), so that a row reads the same from either and
//! `lanes db copy` moves a lab between them value for value.

use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::any::AnyTypeInfo;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::AnyConnection;
use sqlx::{Any, Database, Decode, Encode, Type};

pub(super) type Tx<'a> = sqlx::Transaction<'a, Any>;

/// Which database a store runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The backend a database URL names, or why none does.
    pub fn of_url(url: &str) -> Option<Self> {
        if url.starts_with("sqlite:") {
            Some(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else {
            None
        }
    }

    /// The backend behind a connection (for helpers that only hold a transaction).
    pub(super) fn of(conn: &AnyConnection) -> Self {
        if conn.backend_name().eq_ignore_ascii_case("sqlite") {
            Backend::Sqlite
        } else {
            Backend::Postgres
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        }
    }

    /// The larger of two values (SQLite's two-argument `MAX`).
    pub(super) fn greatest(self) -> &'static str {
        match self {
            Backend::Sqlite => "MAX",
            Backend::Postgres => "GREATEST",
        }
    }

    /// The smaller of two values (SQLite's two-argument `MIN`).
    pub(super) fn least(self) -> &'static str {
        match self {
            Backend::Sqlite => "MIN",
            Backend::Postgres => "LEAST",
        }
    }

    /// `expr` over a group, as one comma-separated text.
    pub(super) fn list_agg(self, expr: &str) -> String {
        match self {
            Backend::Sqlite => format!("group_concat({expr})"),
            Backend::Postgres => format!("string_agg(CAST({expr} AS TEXT), ',')"),
        }
    }
}

/// `$first, $first+1, …` for `n` values bound in a row (an `IN` list, a multi-row `VALUES`).
pub(super) fn placeholders(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A moment as the database keeps it: RFC 3339 text in UTC, the form sqlx's SQLite driver
/// wrote before there was a second backend (so older databases read unchanged). Fractions are
/// as long as they need to be, which keeps text order the order of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Stamp(pub DateTime<Utc>);

impl From<Stamp> for DateTime<Utc> {
    fn from(s: Stamp) -> Self {
        s.0
    }
}

impl Stamp {
    pub(super) fn text(self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::AutoSi, false)
    }

    pub(super) fn parse(text: &str) -> Result<Self, String> {
        if let Ok(t) = DateTime::parse_from_rfc3339(text) {
            return Ok(Stamp(t.with_timezone(&Utc)));
        }
        // SQLite's own `datetime()` form, for rows written by hand.
        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
            .map(|t| Stamp(t.and_utc()))
            .map_err(|_| format!("not a time: {text:?}"))
    }
}

impl Type<Any> for Stamp {
    fn type_info() -> AnyTypeInfo {
        <String as Type<Any>>::type_info()
    }

    fn compatible(ty: &AnyTypeInfo) -> bool {
        <String as Type<Any>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Any> for Stamp {
    fn encode_by_ref(
        &self,
        buf: &mut <Any as Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        <String as Encode<'q, Any>>::encode(self.text(), buf)
    }
}

impl<'r> Decode<'r, Any> for Stamp {
    fn decode(value: <Any as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <String as Decode<'r, Any>>::decode(value)?;
        Stamp::parse(&text).map_err(Into::into)
    }
}

/// A flag as both schemas keep it: 0 or 1.
pub(super) fn flag(b: bool) -> i64 {
    i64::from(b)
}

/// A database error, or the exclusion constraint's refusal as [`super::StoreError::Overlap`].
pub(super) fn overlap_or(e: sqlx::Error) -> super::StoreError {
    if is_overlap_violation(&e) {
        super::StoreError::Overlap(e.to_string())
    } else {
        e.into()
    }
}

/// Whether a statement lost a race for a card on PostgreSQL: it broke the exclusion constraint
/// that keeps holds of one card apart, or the server aborted it to end a deadlock or a
/// serialization conflict (SQLite raises none of these: there the store's own check runs under
/// the write lock).
pub(super) fn is_overlap_violation(e: &sqlx::Error) -> bool {
    // 23P01: exclusion violation; 40P01, 40001: deadlock, serialization failure (the card
    // turns should leave none).
    matches!(e, sqlx::Error::Database(d)
        if matches!(d.code().as_deref(), Some("23P01" | "40P01" | "40001")))
}

/// Advisory lock keys (PostgreSQL): who waits for whom. A booking write holds `CARDS` shared,
/// then its owner's key (one user's bookings take turns for the quota check), then the key of
/// each card it holds, in card id order: bookings of other cards run side by side, two of one
/// card take turns (without it, two inserts that overlap can each wait for the other inside
/// the exclusion constraint's check, and one is aborted as a deadlock a second later), then
/// the key of each group whose quota limits the booking, in group id order (members of one
/// group take turns for its check; a user's own turn does not cover their group). The
/// constraint stays what makes an overlap impossible. Maintenance holds `CARDS` exclusively: it
/// checks against bookings, which no constraint spans. Other read-then-write changes take
/// `WRITES`, as SQLite's single writer. Every transaction takes its locks in this one order,
/// so none waits for another in a circle.
pub(super) mod lock {
    /// Namespace of the two-key form for per-user locks.
    pub const USER: i32 = 0x4c61_6e01;
    /// Namespace of the two-key form for per-card locks.
    pub const CARD: i32 = 0x4c61_6e02;
    /// Namespace of the two-key form for per-group locks.
    pub const GROUP: i32 = 0x4c61_6e03;
    /// One-key locks.
    pub const CARDS: i64 = 0x4c61_6e65_7300_0001;
    pub const WRITES: i64 = 0x4c61_6e65_7300_0002;
    /// Held for as long as one process is the queue's leader (a session lock, see `bus.rs`).
    pub const QUEUE_LEADER: i64 = 0x4c61_6e65_7300_0003;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_reads_back_the_moment_it_wrote_and_text_order_is_time_order() {
        let times = [
            "2026-12-01T08:00:00+00:00",
            "2026-12-01T08:00:00.5+00:00",
            "2026-12-01T08:00:00.123456789+00:00",
            "2026-12-01T08:00:01+00:00",
        ];
        let mut stamps: Vec<Stamp> = times.iter().map(|t| Stamp::parse(t).unwrap()).collect();
        for s in &stamps {
            assert_eq!(Stamp::parse(&s.text()).unwrap(), *s);
        }
        let mut texts: Vec<String> = stamps.iter().map(|s| s.text()).collect();
        texts.sort();
        stamps.sort();
        assert_eq!(texts, stamps.iter().map(|s| s.text()).collect::<Vec<_>>());
        assert!(Stamp::parse("yesterday").is_err());
        assert_eq!(
            Stamp::parse("2026-12-01 08:00:00").unwrap().0,
            DateTime::parse_from_rfc3339("2026-12-01T08:00:00Z").unwrap()
        );
    }

    #[test]
    fn placeholders_count_from_the_first_number() {
        assert_eq!(placeholders(3, 3), "$3, $4, $5");
        assert_eq!(placeholders(1, 0), "");
    }

    #[test]
    fn a_url_names_its_backend() {
        assert_eq!(Backend::of_url("sqlite://x.db"), Some(Backend::Sqlite));
        assert_eq!(Backend::of_url("postgres://h/db"), Some(Backend::Postgres));
        assert_eq!(
            Backend::of_url("postgresql://h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(Backend::of_url("mysql://h/db"), None);
    }
}
