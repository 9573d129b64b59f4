//! Wire types of usage reports (`GET /api/v1/reports/usage`): who used what, and how well.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One user's or group's use over the period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    /// A username or a group name.
    pub name: String,
    /// Cards × hours of their bookings inside the period.
    pub gpu_hours_booked: f64,
    /// Booked card-hours weighted by the cards' utilization: a card at 50 % for an hour is 0.5.
    pub gpu_hours_used: f64,
    /// Booked card-hours in minutes whose utilization averaged under the idle threshold.
    pub idle_booked_hours: f64,
    pub violations: i64,
    /// Jobs that started in the period.
    pub jobs: i64,
}

/// One booking's use of its cards.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BookingUsage {
    pub booking_id: i64,
    pub username: String,
    pub gpus: usize,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// Cards × hours inside the period.
    pub gpu_hours_booked: f64,
    pub gpu_hours_used: f64,
    /// Mean utilization of its cards over its slot; `None` without readings.
    pub avg_utilization_pct: Option<f64>,
    /// Most memory any of its cards held; `None` without readings.
    pub peak_memory_bytes: Option<u64>,
}

/// A usage report over `[from, to)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// Utilization under this (percent) counts as idle.
    pub idle_threshold_pct: u32,
    pub users: Vec<UsageRow>,
    pub groups: Vec<UsageRow>,
    pub bookings: Vec<BookingUsage>,
}
