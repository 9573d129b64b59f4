//! What admins set: portal settings, the enforcement policy, quotas, maintenance windows, and
//! the queue's settings and shares; and, on a simulated fleet, processes for demos. Each is checked, stored with its audit line in one
//! transaction, and then takes effect in the running service.

use super::Said;
use super::{require_admin, UseCaseError};
use crate::audit::AuditAction;
use crate::queue::Queue;
use crate::store::{AuditEntry, Store};
use crate::telemetry::sim::ExtraProcess;
use crate::telemetry::Processes;
use chrono::{DateTime, Utc};
use lanes_types::account::{PortalSettings, User};
use lanes_types::booking::Quotas;
use lanes_types::booking::{CreateMaintenance, MaintenanceBlock};
use lanes_types::enforcement::Policy;
use lanes_types::query::{InjectProcess, Injected};
use lanes_types::queue::{QueueSettings, Shares};
use lanes_types::GpuState;
use std::sync::RwLock;

fn replace<T>(live: &RwLock<T>, value: T) {
    *live
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = value;
}

/// Replaces the portal settings (anonymous dashboard, booking horizon).
pub async fn save_portal_settings(
    store: &Store,
    admin: &User,
    settings: PortalSettings,
    live: &RwLock<PortalSettings>,
    now: DateTime<Utc>,
) -> Result<PortalSettings, UseCaseError> {
    require_admin(admin)?;
    settings
        .check()
        .map_err(|e| UseCaseError::Unprocessable(e.into()))?;
    let detail = format!(
        "anonymous dashboard {}, booking horizon {} days",
        if settings.anonymous_dashboard {
            "on"
        } else {
            "off"
        },
        settings.booking_horizon_days
    );
    let entry =
        AuditEntry::new(Some(admin.id), AuditAction::SettingsUpdate, "portal").detail(detail);
    store.settings().save_portal(&settings, &entry, now).await?;
    replace(live, settings.clone());
    Ok(settings)
}

/// Replaces the enforcement policy (watchdog, exemptions, idle release, webhook).
pub async fn save_policy(
    store: &Store,
    admin: &User,
    mut policy: Policy,
    live: &RwLock<Policy>,
    now: DateTime<Utc>,
) -> Result<Policy, UseCaseError> {
    require_admin(admin)?;
    {
        let stored = live.read().unwrap_or_else(|p| p.into_inner());
        let same_url = stored.webhook_url == policy.webhook_url;
        policy.webhook_secret = lanes_types::enforcement::keep_secret(
            policy.webhook_secret.take(),
            stored.webhook_secret.clone(),
            same_url,
        );
        policy.webhook_secret_set = false;
    }
    if let Some(problem) = policy.problem() {
        return Err(UseCaseError::Unprocessable(problem.into()));
    }
    // The webhook URL is a secret: the audit says whether there is one, not what it is.
    let detail = format!(
        "watchdog {}, grace {}, exempt users {}, exempt commands {}, idle under {}% for {}, \
         release {}, webhook {} ({}, secret {})",
        policy.watchdog.as_str(),
        seconds(policy.violation_grace_s),
        policy.exempt_users.len(),
        policy.exempt_commands.len(),
        policy.idle_threshold_pct,
        seconds(policy.idle_window_s),
        if policy.idle_release { "on" } else { "off" },
        if policy.webhook_url.is_some() {
            "set"
        } else {
            "none"
        },
        policy.webhook_format.as_str(),
        if policy.webhook_secret.is_some() {
            "set"
        } else {
            "none"
        },
    );
    let entry = AuditEntry::new(Some(admin.id), AuditAction::PolicyUpdate, "policy").detail(detail);
    store
        .enforcement()
        .save_policy(&policy, &entry, now)
        .await?;
    replace(live, policy.clone());
    Ok(policy)
}

/// A number of seconds as people read a duration ("30m", not "1800 s").
fn seconds(s: u64) -> String {
    let s = i64::try_from(s).unwrap_or(i64::MAX / 1000);
    lanes_types::units::format_duration(chrono::Duration::seconds(s))
}

/// Replaces the quotas: the default, per group and per user.
pub async fn save_quotas(
    store: &Store,
    admin: &User,
    quotas: Quotas,
    now: DateTime<Utc>,
) -> Result<Quotas, UseCaseError> {
    require_admin(admin)?;
    let all = std::iter::once(&quotas.default)
        .chain(quotas.groups.values())
        .chain(quotas.users.values());
    for quota in all {
        let negative = [
            quota.gpu_hours_per_week,
            quota.max_booking_hours,
            quota.max_days_ahead,
        ]
        .into_iter()
        .flatten()
        .any(|v| !v.is_finite() || v < 0.0);
        if negative {
            return Err(UseCaseError::Unprocessable(
                "quota values must be finite and not negative".into(),
            ));
        }
    }
    let detail = serde_json::to_string(&quotas).unwrap_or_default();
    let audit = AuditEntry::new(Some(admin.id), AuditAction::QuotaUpdate, "quotas").detail(detail);
    store.quotas().save(&quotas, &audit, now).await?;
    Ok(store.quotas().list().await?)
}

/// Blocks cards for maintenance; refused when a booking holds one of them then.
pub async fn add_maintenance(
    store: &Store,
    admin: &User,
    request: CreateMaintenance,
    now: DateTime<Utc>,
) -> Result<MaintenanceBlock, UseCaseError> {
    require_admin(admin)?;
    if request.gpus.is_empty() {
        return Err(UseCaseError::Unprocessable("name at least one GPU".into()));
    }
    let audit =
        AuditEntry::new(Some(admin.id), AuditAction::MaintenanceCreate, "").detail(format!(
            "{} → {}: {}",
            request.start.to_rfc3339(),
            request.end.to_rfc3339(),
            request.reason
        ));
    Ok(store.maintenance().create(&request, audit, now).await?)
}

/// Ends (or withdraws) a maintenance block.
pub async fn end_maintenance(
    store: &Store,
    admin: &User,
    id: i64,
    now: DateTime<Utc>,
) -> Result<(), UseCaseError> {
    require_admin(admin)?;
    let audit = AuditEntry::new(
        Some(admin.id),
        AuditAction::MaintenanceDelete,
        format!("maintenance {id}"),
    );
    if store.maintenance().delete(id, &audit, now).await? {
        Ok(())
    } else {
        Err(UseCaseError::NotFound(Said::NoSuchMaintenance))
    }
}

/// Replaces the queue's settings (policy, backfill, limits).
pub async fn save_queue_settings(
    queue: &Queue,
    admin: &User,
    settings: QueueSettings,
) -> Result<QueueSettings, UseCaseError> {
    require_admin(admin)?;
    settings
        .check()
        .map_err(|e| UseCaseError::Unprocessable(e.into()))?;
    let detail = serde_json::to_string(&settings).unwrap_or_default();
    let audit = AuditEntry::new(Some(admin.id), AuditAction::QueueSettings, "queue").detail(detail);
    queue.save_settings(settings, &audit).await?;
    Ok(queue.settings())
}

/// Replaces the fair-share weights of users and groups.
pub async fn save_shares(
    queue: &Queue,
    admin: &User,
    shares: Shares,
) -> Result<Shares, UseCaseError> {
    require_admin(admin)?;
    shares
        .check()
        .map_err(|e| UseCaseError::Unprocessable(e.into()))?;
    let detail = serde_json::to_string(&shares).unwrap_or_default();
    let audit = AuditEntry::new(Some(admin.id), AuditAction::QueueShares, "shares").detail(detail);
    queue.save_shares(shares, &audit).await?;
    Ok(queue.shares())
}

/// On a simulated fleet only: makes a process no one booked appear on a card, so demos and
/// tests can watch the watchdog work.
pub async fn inject_process(
    store: &Store,
    admin: &User,
    processes: &Processes,
    cards: &[GpuState],
    request: InjectProcess,
    now: DateTime<Utc>,
) -> Result<Injected, UseCaseError> {
    require_admin(admin)?;
    let Processes::Simulated(control) = processes else {
        return Err(UseCaseError::NotFound(
            "this node reads real GPUs; processes can only be injected into a simulated fleet"
                .into(),
        ));
    };
    if !cards.iter().any(|g| g.info.uuid == request.gpu) {
        return Err(UseCaseError::Unprocessable(
            format!("no simulated GPU {:?} on this node", request.gpu).into(),
        ));
    }
    let bad_name = |s: &str| s.is_empty() || s.len() > 32 || s.chars().any(char::is_control);
    if bad_name(&request.user) || bad_name(&request.command) || request.utilization_pct > 100 {
        return Err(UseCaseError::Unprocessable(
            "user and command are 1 to 32 printable characters; utilization_pct at most 100".into(),
        ));
    }
    let pid = control.inject(ExtraProcess {
        pid: 0,
        cards: vec![request.gpu.clone()],
        user: request.user.clone(),
        command: request.command.clone(),
        memory_bytes: request.memory_bytes,
        utilization_pct: request.utilization_pct,
    });
    let entry =
        AuditEntry::new(Some(admin.id), AuditAction::SimInject, format!("pid {pid}")).detail(
            format!("{} as {} on {}", request.command, request.user, request.gpu),
        );
    store.audit_log().record(&entry, now).await?;
    Ok(Injected { pid })
}
