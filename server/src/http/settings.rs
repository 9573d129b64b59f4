//! Portal settings admins change at run time: `GET|PUT /api/v1/settings`.

use super::auth::AdminUser;
use super::{ApiError, ApiJson, AppState, Routes};
use crate::usecases;
use axum::extract::State;
use axum::Json;
use lanes_types::account::PortalSettings;
use lanes_types::api;

pub fn routes() -> Routes {
    Routes::default()
        .endpoint::<api::Settings, _, _>(read)
        .endpoint::<api::SaveSettings, _, _>(replace)
}

async fn read(State(state): State<AppState>, _: AdminUser) -> Json<PortalSettings> {
    Json(state.portal_settings())
}

async fn replace(
    State(state): State<AppState>,
    AdminUser(admin): AdminUser,
    ApiJson(settings): ApiJson<PortalSettings>,
) -> Result<Json<PortalSettings>, ApiError> {
    let saved = usecases::settings::save_portal_settings(
        &state.store,
        &admin,
        settings,
        &state.portal,
        state.clock.now(),
    )
    .await?;
    Ok(Json(saved))
}
