//! Card health as people act on it: every card's verdict, its timeline, an admin putting a card
//! back in service, and faults injected into a simulated card.

use super::{require_admin, UseCaseError};
use crate::audit::AuditAction;
use crate::store::{AuditEntry, Store};
use crate::telemetry::Processes;
use chrono::{DateTime, Utc};
use lanes_types::account::User;
use lanes_types::booking::GpuRef;
use lanes_types::health::{CardHealth, ClearHealth, HealthCause, InjectFault};
use lanes_types::GpuState;

/// Every card of the pool with its verdict and counters as the ticks carry them, and since when
/// and under which drain as the database keeps them.
pub async fn cards(store: &Store, gpus: &[GpuState]) -> Result<Vec<CardHealth>, UseCaseError> {
    let kept = store.card_health().all().await?;
    Ok(gpus
        .iter()
        .filter(|g| !g.unmanaged)
        .map(|g| {
            let gpu = GpuRef {
                node: g.info.node.clone(),
                uuid: g.info.uuid.clone(),
            };
            let row = kept.iter().find(|k| k.gpu == gpu);
            CardHealth {
                index: g.info.index,
                condition: g.condition.clone(),
                since: row.and_then(|r| r.since),
                drain: row.and_then(|r| r.drain),
                counters: g.counters.clone(),
                gpu,
            }
        })
        .collect())
}

/// An admin puts a card back in service: healthy, its drain ended, audited. The node's keeper
/// hears of it (on any node) and starts from the counters as they are now.
pub async fn clear(
    store: &Store,
    admin: &User,
    request: &ClearHealth,
    now: DateTime<Utc>,
) -> Result<(), UseCaseError> {
    require_admin(admin)?;
    if request.note.chars().count() > 500 {
        return Err(UseCaseError::BadRequest(
            "note: at most 500 characters".into(),
        ));
    }
    let detail = if request.note.is_empty() {
        format!("GPU {} on {} cleared", request.gpu.uuid, request.gpu.node)
    } else {
        format!(
            "GPU {} on {} cleared: {}",
            request.gpu.uuid, request.gpu.node, request.note
        )
    };
    let audit = AuditEntry::new(
        Some(admin.id),
        AuditAction::HealthClear,
        format!("GPU {}", request.gpu.uuid),
    )
    .detail(detail);
    store
        .card_health()
        .clear(&request.gpu, HealthCause::Cleared, None, audit, now)
        .await
        .map_err(|e| match e {
            crate::store::StoreError::Invalid(message) => UseCaseError::NotFound(message.into()),
            other => other.into(),
        })?;
    Ok(())
}

/// An admin injects a fault into a card of this simulated node (its next reading shows it).
pub async fn inject_fault(
    store: &Store,
    admin: &User,
    processes: &Processes,
    cards: &[GpuState],
    fault: &InjectFault,
    now: DateTime<Utc>,
) -> Result<(), UseCaseError> {
    require_admin(admin)?;
    let Processes::Simulated(control) = processes else {
        return Err(UseCaseError::NotFound(
            "this node reads real GPUs; faults can only be injected into a simulated fleet".into(),
        ));
    };
    if !cards.iter().any(|g| g.info.uuid == fault.gpu()) {
        return Err(UseCaseError::Unprocessable(
            format!("no simulated GPU {:?} on this node", fault.gpu()).into(),
        ));
    }
    if let InjectFault::Throttle { reasons, .. } = fault {
        if reasons.len() > 16 || reasons.iter().any(|r| r.is_empty() || r.len() > 40) {
            return Err(UseCaseError::Unprocessable(
                "reasons: at most 16 names of 1 to 40 characters".into(),
            ));
        }
    }
    control.inject_fault(fault, now.timestamp_millis());
    let detail = serde_json::to_string(fault).unwrap_or_default();
    let entry = AuditEntry::new(Some(admin.id), AuditAction::SimFault, fault.gpu()).detail(detail);
    store.audit_log().record(&entry, now).await?;
    Ok(())
}
