//! The rules a request can break, named once: the server refuses with one, the error body
//! carries it as `rule` (422), and clients match on it instead of on its wire name.

use serde::{Deserialize, Serialize};

macro_rules! rules {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// A rule a request broke.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum Rule {
            $($(#[$doc])* #[serde(rename = $name)] $variant,)*
            /// A rule this build does not know (a newer server's).
            #[serde(other, rename = "other")]
            Other,
        }

        impl Rule {
            /// Every rule this build knows.
            pub const ALL: &'static [Rule] = &[$(Rule::$variant,)*];

            /// Its name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Rule::$variant => $name,)*
                    Rule::Other => "other",
                }
            }
        }
    };
}

rules! {
    /// A slot's end must come after its start.
    EndAfterStart = "end_after_start",
    /// A new slot may not start in the past.
    StartNotInPast = "start_not_in_past",
    /// An extension must move the end later.
    ExtendLater = "extend_later",
    /// Only upcoming or active bookings can be extended.
    ExtendLiveOnly = "extend_live_only",
    /// Bookings end at most the admin's horizon ahead.
    Horizon = "horizon",
    /// Times lie between 1970 and 9999.
    TimeRange = "time_range",
    /// Only upcoming or active bookings can be withdrawn.
    WithdrawLiveOnly = "withdraw_live_only",
    /// A note has a longest length.
    NoteLength = "note_length",
    /// A request names 1 to the most GPUs, each once.
    Gpus = "gpus",
    /// A request asks for 1 to the most GPUs.
    Count = "count",
    /// A request gives named GPUs or a count, not both.
    GpusOrCount = "gpus_or_count",
    /// A named GPU must exist.
    UnknownGpu = "unknown_gpu",
    /// A named GPU must be one Lanes manages.
    UnmanagedGpu = "unmanaged_gpu",
    /// A GPU UUID must name one card.
    AmbiguousGpu = "ambiguous_gpu",
    /// A loan is its holder's to take back, not its borrower's to change.
    Loan = "loan",
    /// A queue job's booking lasts the job's time limit.
    QueueBooking = "queue_booking",
    /// A card moves from a live booking that holds it, with no job running on it, to a free
    /// card of the same node.
    MoveCard = "move_card",
    /// Only an idle lending booking's cards can be lent.
    NotLendable = "not_lendable",
    /// A searched duration must be positive.
    Duration = "duration",
    /// A search returns 1 to the most windows.
    Limit = "limit",
    /// Quota: the longest booking.
    MaxBookingHours = "max_booking_hours",
    /// Quota: how far ahead a booking may end.
    MaxDaysAhead = "max_days_ahead",
    /// Quota: the most GPUs held at once.
    MaxGpus = "max_gpus",
    /// Quota: the most GPU-hours in any 7 days.
    GpuHoursPerWeek = "gpu_hours_per_week",
    /// Quota: the most upcoming bookings.
    MaxUpcoming = "max_upcoming",
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_is_its_wire_name_both_ways_and_an_unknown_one_still_reads() {
        for rule in Rule::ALL {
            let wire = serde_json::to_string(rule).unwrap();
            assert_eq!(wire, format!("\"{}\"", rule.as_str()));
            assert_eq!(serde_json::from_str::<Rule>(&wire).unwrap(), *rule);
        }
        let newer: Rule = serde_json::from_str("\"max_cpus\"").unwrap();
        assert_eq!(newer, Rule::Other);
    }
}
