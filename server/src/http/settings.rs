//! Portal settings admins change at run time: `GET|PUT /api/v1/settings`.

use super::auth::AdminUser;
use super::{ApiError, ApiJson, AppState, Routes};
use crate::audit::AuditAction;
use crate::store::AuditEntry;
use axum::extract::State;
use axum::routing::get;
use axum::Json;
use lanes_types::account::PortalSettings;

pub fn routes() -> Routes {
    Routes::default().route("/api/v1/settings", get(read).put(replace))
}

async fn read(State(state): State<AppState>, _: AdminUser) -> Json<PortalSettings> {
    Json(state.portal_settings())
}

async fn replace(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(settings): ApiJson<PortalSettings>,
) -> Result<Json<PortalSettings>, ApiError> {
    settings.check().map_err(ApiError::Unprocessable)?;
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
    state
        .store
        .save_portal_settings(&settings, &entry, chrono::Utc::now())
        .await?;
    *state
        .portal
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = settings.clone();
    Ok(Json(settings))
}
