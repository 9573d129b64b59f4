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
    /// Card-hours weighted by the cards' utilization (a card at 50 % for an hour is 0.5),
    /// split between the users who shared a card by their processes' SM share, whoever booked
    /// it. Where the driver gives no per-process samples, a booked card's use is its holder's.
    pub gpu_hours_used: f64,
    /// The part of `gpu_hours_used` that comes from card-level figures alone (booked cards
    /// without per-process samples, or idle draw with no process on the card).
    #[serde(default)]
    pub gpu_hours_used_card_level: f64,
    /// Booked card-hours in minutes whose utilization averaged under the idle threshold.
    pub idle_booked_hours: f64,
    pub violations: i64,
    /// Jobs that started in the period.
    pub jobs: i64,
    /// Energy its processes drew, split like `gpu_hours_used`, plus what its booked cards drew
    /// while no process of anyone's was measured on them.
    #[serde(default)]
    pub energy_kwh: f64,
    /// `energy_kwh` at the admins' price per kWh; `None` when none is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// `energy_kwh` at the admins' grid carbon intensity, kilograms of CO2 equivalent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co2e_kg: Option<f64>,
}

/// One booking's use of its cards.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BookingUsage {
    pub booking_id: i64,
    /// The project it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    pub username: String,
    pub gpus: usize,
    /// Its cards by name ("GPU 3 · node-a"), node then index.
    #[serde(default)]
    pub cards: Vec<String>,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// Cards × hours inside the period.
    pub gpu_hours_booked: f64,
    pub gpu_hours_used: f64,
    /// Mean utilization of its cards over its slot; `None` without readings.
    pub avg_utilization_pct: Option<f64>,
    /// Most memory any of its cards held; `None` without readings.
    pub peak_memory_bytes: Option<u64>,
    /// What its cards drew inside its slot and the period.
    #[serde(default)]
    pub energy_kwh: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co2e_kg: Option<f64>,
}

/// One Lanes job's use of cards, from per-process samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobUsage {
    pub job_id: i64,
    pub username: String,
    /// Its processes' share of their cards' utilization, in card-hours.
    pub gpu_hours_used: f64,
    /// Mean SM share of its processes while on a card, percent.
    pub mean_sm_pct: Option<f64>,
    pub energy_kwh: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub co2e_kg: Option<f64>,
}

/// One Unix account's use of cards, from per-process samples (whether or not it is a Lanes
/// user's, booked or not).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnixUsage {
    pub unix_user: String,
    /// The Lanes user it belongs to, when an account names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    pub gpu_hours_used: f64,
    pub hours_on_card: f64,
    pub mean_sm_pct: Option<f64>,
    pub energy_kwh: f64,
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
    #[serde(default)]
    pub jobs: Vec<JobUsage>,
    #[serde(default)]
    pub unix_users: Vec<UnixUsage>,
    /// Whether per-process samples were recorded in the period: without them, used hours are
    /// card-level figures charged to the cards' holders.
    #[serde(default)]
    pub per_process: bool,
    /// The admins' price per kWh and grid carbon intensity (g CO2e per kWh), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_price_per_kwh: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carbon_g_per_kwh: Option<f64>,
}

/// Millijoules in a kilowatt-hour.
pub const MJ_PER_KWH: f64 = 3.6e9;

/// Energy an active booking's cards drew so far (`GET /api/v1/bookings/energy`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BookingEnergyNow {
    pub booking_id: i64,
    pub energy_kwh: f64,
}
