//! Why a request was refused, for people: a sentence Lanes has in every language, with the
//! values it names, or English text from deeper layers that has no translation yet. The API
//! says a typed sentence whole in the caller's language; only [`Said::Text`] falls back to
//! "its code's sentence: the English detail".

use lanes_app::i18n::i18n::td_string;
use lanes_app::i18n::Locale;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Said {
    NoSuchBooking,
    NoSuchJob,
    NoSuchQueueJob,
    NoSuchUser,
    NoSuchToken,
    NoSuchMaintenance,
    NoUserNamed(String),
    OnlyAdmins,
    /// Someone else's job: only its owner or an admin may see or change it.
    NotYourJob,
    /// Someone else's booking: only its owner or an admin may change it.
    NotYourBooking,
    /// Jobs run as a booking's owner, so only they may submit to it.
    OnlyHolderSubmits,
    /// The booking no longer holds cards (ended, cancelled, released).
    BookingOver,
    /// A loan of idle cards takes one preemptible queue job, none other.
    BookingIsLoan,
    JobOver,
    /// A queue job's card count beyond what the pool has (with the memory asked for).
    QueueGpus {
        eligible: usize,
        with_memory: bool,
    },
    /// A queue job wider than the largest node (a job's cards are all on one node).
    QueueNode {
        largest: usize,
        with_memory: bool,
    },
    /// A queue job wider than its member's limit of cards at once: it could never start.
    QueueQuota {
        gpus: u32,
        max: u32,
    },
    /// A queue job's time limit beyond the admins' maximum.
    TimeLimit {
        max_s: i64,
    },
    WrongCurrentPassword,
    /// No mail server: a member's new address cannot be confirmed.
    NoMailServer,
    /// A directory account made at its first sign-in waits for an admin.
    AccountPending,
    /// The account signs in through the OIDC provider, never with a password here.
    SignInWith(String),
    /// Members sign in through the directory; local passwords are for admins.
    MembersUseDirectory,
    /// The directory's name is another account's username.
    UsernameTaken(String),
    /// Words from deeper layers, in English.
    Text(String),
}

impl From<String> for Said {
    fn from(text: String) -> Self {
        Said::Text(text)
    }
}

impl From<&str> for Said {
    fn from(text: &str) -> Self {
        Said::Text(text.to_string())
    }
}

impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Said::Text(text) => f.write_str(text),
            typed => f.write_str(&typed.said_in(Locale::en).unwrap_or_default()),
        }
    }
}

impl Said {
    /// The whole sentence in `locale`; `None` for English text with no translation.
    pub fn said_in(&self, locale: Locale) -> Option<String> {
        let duration = |s: i64| lanes_app::dates::duration_in(s, locale);
        Some(match self {
            Said::NoSuchBooking => td_string!(locale, api.said.no_such_booking).into(),
            Said::NoSuchJob => td_string!(locale, api.said.no_such_job).into(),
            Said::NoSuchQueueJob => td_string!(locale, api.said.no_such_queue_job).into(),
            Said::NoSuchUser => td_string!(locale, api.said.no_such_user).into(),
            Said::NoSuchToken => td_string!(locale, api.said.no_such_token).into(),
            Said::NoSuchMaintenance => td_string!(locale, api.said.no_such_maintenance).into(),
            Said::NoUserNamed(name) => {
                td_string!(locale, api.said.no_user_named, name = format!("{name:?}"))
            }
            Said::OnlyAdmins => td_string!(locale, api.said.only_admins).into(),
            Said::NotYourJob => td_string!(locale, api.said.not_your_job).into(),
            Said::NotYourBooking => td_string!(locale, api.said.not_your_booking).into(),
            Said::OnlyHolderSubmits => td_string!(locale, api.said.only_holder_submits).into(),
            Said::BookingOver => td_string!(locale, api.said.booking_over).into(),
            Said::BookingIsLoan => td_string!(locale, api.said.booking_is_loan).into(),
            Said::JobOver => td_string!(locale, api.said.job_over).into(),
            Said::QueueGpus {
                eligible,
                with_memory: false,
            } => td_string!(locale, api.said.queue_gpus, max = *eligible),
            Said::QueueGpus {
                eligible,
                with_memory: true,
            } => td_string!(locale, api.said.queue_gpus_memory, max = *eligible),
            Said::QueueNode {
                largest,
                with_memory: false,
            } => td_string!(locale, api.said.queue_node, max = *largest),
            Said::QueueNode {
                largest,
                with_memory: true,
            } => td_string!(locale, api.said.queue_node_memory, max = *largest),
            Said::QueueQuota { gpus, max } => {
                td_string!(locale, api.said.queue_quota, gpus = *gpus, max = *max)
            }
            Said::TimeLimit { max_s } => {
                td_string!(locale, api.said.time_limit, max = duration(*max_s))
            }
            Said::WrongCurrentPassword => td_string!(locale, api.said.wrong_password).into(),
            Said::NoMailServer => td_string!(locale, api.said.no_mail_server).into(),
            Said::AccountPending => td_string!(locale, api.said.account_pending).into(),
            Said::SignInWith(name) => {
                td_string!(locale, api.said.sign_in_with, name = name.clone())
            }
            Said::MembersUseDirectory => td_string!(locale, api.said.members_use_directory).into(),
            Said::UsernameTaken(name) => {
                td_string!(locale, api.said.username_taken, name = format!("{name:?}"))
            }
            Said::Text(_) => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_sentence_is_whole_in_each_language_and_text_stays_english() {
        let said = Said::QueueGpus {
            eligible: 8,
            with_memory: false,
        };
        let (en, zh) = (said.to_string(), said.said_in(Locale::zh).unwrap());
        assert!(en.contains('8') && zh.contains('8'), "{en} / {zh}");
        assert!(
            !zh.chars().any(|c| c.is_ascii_alphabetic()),
            "no English in {zh}"
        );
        assert_eq!(Said::from("deeper words").said_in(Locale::zh), None);
        assert_eq!(Said::from("deeper words").to_string(), "deeper words");
    }
}
