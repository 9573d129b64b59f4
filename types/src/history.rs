//! Wire types of the utilization history (`GET /api/v1/history`).

use serde::{Deserialize, Serialize};

/// One bucket of a card's history: its start and the metric's min, mean and max in it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryBucket {
    /// Start of the bucket, Unix milliseconds.
    pub t_ms: i64,
    pub min: f64,
    pub avg: f64,
    pub max: f64,
}

/// One card's buckets, oldest first. A bucket without readings is absent: a gap, not a zero.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistorySeries {
    pub node: String,
    pub uuid: String,
    /// The card's index on its node, for its name ("GPU 3 · node-a"); `None` for a card
    /// Lanes no longer knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    pub points: Vec<HistoryBucket>,
}

impl HistorySeries {
    /// "GPU 3 · node-a", or the UUID's start for a card no longer known.
    pub fn name(&self) -> String {
        match self.index {
            Some(i) => crate::card_name(i, &self.node),
            None => format!(
                "{} · {}",
                self.uuid.chars().take(12).collect::<String>(),
                self.node
            ),
        }
    }
}

/// The answer to a history query.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryAnswer {
    /// `utilization` (%), `memory` (bytes), `temperature` (°C), `power` (W), `sm_clock` (MHz).
    pub metric: String,
    /// Where the buckets came from: `raw` readings, `1m`, `10m` or `1h` rollups.
    pub resolution: String,
    /// Width of each bucket, seconds.
    pub bucket_s: i64,
    pub from_ms: i64,
    pub to_ms: i64,
    pub series: Vec<HistorySeries>,
}
