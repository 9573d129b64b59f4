//! What the audit log can say happened. One enum, so code that decides on an entry (which
//! change a withdrawal was, what the log page filters) matches variants, not strings; the
//! dotted code is only how an entry is written and shown.

/// One kind of audited change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuditAction {
    AuthLogin,
    AuthLoginFailed,
    UserCreate,
    UserUpdate,
    UserPasswordChange,
    GroupCreate,
    TokenCreate,
    TokenRevoke,
    SettingsUpdate,
    QuotaUpdate,
    PolicyUpdate,
    /// A member asked to withdraw a booking; the store records it as a cancel or a release.
    BookingWithdraw,
    BookingCreate,
    BookingCancel,
    BookingRelease,
    /// The enforcer released a booking that sat idle past its grace period.
    BookingReleaseIdle,
    BookingExtend,
    MaintenanceCreate,
    MaintenanceDelete,
    JobSubmit,
    JobCancel,
    /// A member's shell joined one of their bookings on its node (`lanes shell`).
    ShellOpen,
    QueueSubmit,
    QueueCancel,
    /// The scheduler started a queue job on cards it booked for it.
    QueueStart,
    /// A queue job ended and the rest of its booking was given back.
    QueueRelease,
    /// The scheduler started a preemptible queue job on cards an idle booking lends.
    QueueLend,
    /// A booking's holder took back cards it had lent (their process appeared, they submitted
    /// a job, or they asked).
    LoanReclaim,
    /// A preemptible job whose lent cards were taken back went back to the queue.
    QueueRequeue,
    /// Least attained service: the queue asked to preempt a running preemptible job for a
    /// waiting one of a higher level.
    QueuePreempt,
    QueueSettings,
    QueueShares,
    SimInject,
    /// `lanes db copy` filled this database from another.
    DatabaseCopy,
    /// `lanes restore` put a backup in place as this database.
    DatabaseRestore,
    /// A booking's holder answered an idle warning: still using it.
    BookingInUse,
    /// Admins changed the notification settings (SMTP, defaults, required events).
    NotifySettings,
    /// A member changed what they are told of, and where.
    NotifyPrefs,
    /// A test message was queued.
    NotifyTest,
    /// A member chose the interface's language.
    UserLanguage,
    /// A member asked for a new address (a link went to it), confirmed it, or removed theirs.
    UserEmail,
    /// The directory's sign-in or sync changed an account: names, Unix account, groups, role,
    /// or disabled it because the directory no longer has it.
    UserDirectorySync,
    /// A member made a one-time code for signing in on a terminal.
    AuthTerminalCode,
    /// A failing card was taken out of service (an open-ended maintenance block).
    HealthDrain,
    /// A card was put back in service: by an admin, or after a reset read its counters clean.
    HealthClear,
    /// A card of a booking was exchanged for another of its node.
    BookingMove,
    /// A fault was injected into a simulated card.
    SimFault,
}

impl AuditAction {
    pub const ALL: [AuditAction; 47] = [
        AuditAction::AuthLogin,
        AuditAction::AuthLoginFailed,
        AuditAction::UserCreate,
        AuditAction::UserUpdate,
        AuditAction::UserPasswordChange,
        AuditAction::GroupCreate,
        AuditAction::TokenCreate,
        AuditAction::TokenRevoke,
        AuditAction::SettingsUpdate,
        AuditAction::QuotaUpdate,
        AuditAction::PolicyUpdate,
        AuditAction::BookingWithdraw,
        AuditAction::BookingCreate,
        AuditAction::BookingCancel,
        AuditAction::BookingRelease,
        AuditAction::BookingReleaseIdle,
        AuditAction::BookingExtend,
        AuditAction::MaintenanceCreate,
        AuditAction::MaintenanceDelete,
        AuditAction::JobSubmit,
        AuditAction::JobCancel,
        AuditAction::ShellOpen,
        AuditAction::QueueSubmit,
        AuditAction::QueueCancel,
        AuditAction::QueueStart,
        AuditAction::QueueRelease,
        AuditAction::QueueLend,
        AuditAction::LoanReclaim,
        AuditAction::QueueRequeue,
        AuditAction::QueuePreempt,
        AuditAction::QueueSettings,
        AuditAction::QueueShares,
        AuditAction::SimInject,
        AuditAction::DatabaseCopy,
        AuditAction::DatabaseRestore,
        AuditAction::BookingInUse,
        AuditAction::NotifySettings,
        AuditAction::NotifyPrefs,
        AuditAction::NotifyTest,
        AuditAction::UserLanguage,
        AuditAction::UserEmail,
        AuditAction::UserDirectorySync,
        AuditAction::AuthTerminalCode,
        AuditAction::HealthDrain,
        AuditAction::HealthClear,
        AuditAction::BookingMove,
        AuditAction::SimFault,
    ];

    /// The dotted code the log stores and shows.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::AuthLogin => "auth.login",
            AuditAction::AuthLoginFailed => "auth.login_failed",
            AuditAction::UserCreate => "user.create",
            AuditAction::UserUpdate => "user.update",
            AuditAction::UserPasswordChange => "user.password_change",
            AuditAction::GroupCreate => "group.create",
            AuditAction::TokenCreate => "token.create",
            AuditAction::TokenRevoke => "token.revoke",
            AuditAction::SettingsUpdate => "settings.update",
            AuditAction::QuotaUpdate => "quota.update",
            AuditAction::PolicyUpdate => "policy.update",
            AuditAction::BookingWithdraw => "booking.withdraw",
            AuditAction::BookingCreate => "booking.create",
            AuditAction::BookingCancel => "booking.cancel",
            AuditAction::BookingRelease => "booking.release",
            AuditAction::BookingReleaseIdle => "booking.release_idle",
            AuditAction::BookingExtend => "booking.extend",
            AuditAction::MaintenanceCreate => "maintenance.create",
            AuditAction::MaintenanceDelete => "maintenance.delete",
            AuditAction::JobSubmit => "job.submit",
            AuditAction::JobCancel => "job.cancel",
            AuditAction::ShellOpen => "job.shell",
            AuditAction::QueueSubmit => "queue.submit",
            AuditAction::QueueCancel => "queue.cancel",
            AuditAction::QueueStart => "queue.start",
            AuditAction::QueueRelease => "queue.release",
            AuditAction::QueueLend => "queue.lend",
            AuditAction::LoanReclaim => "booking.reclaim",
            AuditAction::QueueRequeue => "queue.requeue",
            AuditAction::QueuePreempt => "queue.preempt",
            AuditAction::QueueSettings => "queue.settings",
            AuditAction::QueueShares => "queue.shares",
            AuditAction::SimInject => "sim.inject",
            AuditAction::DatabaseCopy => "database.copy",
            AuditAction::DatabaseRestore => "database.restore",
            AuditAction::BookingInUse => "booking.in_use",
            AuditAction::NotifySettings => "notify.settings",
            AuditAction::NotifyPrefs => "notify.prefs",
            AuditAction::NotifyTest => "notify.test",
            AuditAction::UserLanguage => "user.language",
            AuditAction::UserEmail => "user.email",
            AuditAction::UserDirectorySync => "user.directory_sync",
            AuditAction::AuthTerminalCode => "auth.terminal_code",
            AuditAction::HealthDrain => "health.drain",
            AuditAction::HealthClear => "health.clear",
            AuditAction::BookingMove => "booking.move",
            AuditAction::SimFault => "sim.fault",
        }
    }
}

impl std::fmt::Display for AuditAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_has_its_own_code() {
        let codes: std::collections::HashSet<_> =
            AuditAction::ALL.iter().map(|a| a.as_str()).collect();
        assert_eq!(codes.len(), AuditAction::ALL.len());
    }
}
