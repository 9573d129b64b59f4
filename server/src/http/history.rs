//! `GET /api/v1/history`: one metric of one card or all, over a range, in at most `points`
//! buckets of min, mean and max, from the coarsest stored resolution that still has enough.

use super::auth::CurrentUser;
use super::{ApiError, ApiQuery, AppState, Routes};
use crate::history::{self, Metric, MAX_POINTS};
use axum::extract::State;
use axum::Json;
use lanes_types::api;
use lanes_types::history::{HistoryAnswer, HistoryBucket, HistorySeries};
use lanes_types::query::HistoryQuery;

pub fn routes() -> Routes {
    Routes::default().endpoint::<api::History, _, _>(query)
}

async fn query(
    State(state): State<AppState>,
    _: CurrentUser,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> Result<Json<HistoryAnswer>, ApiError> {
    let now = state.clock.now();
    let metric: Metric = q
        .metric
        .as_deref()
        .unwrap_or("utilization")
        .parse()
        .map_err(ApiError::BadRequest)?;
    super::check_times(&[q.from, q.to])?;
    let to = q.to.unwrap_or(now);
    let from = q.from.unwrap_or_else(|| {
        to.checked_sub_signed(chrono::Duration::hours(1))
            .unwrap_or(to)
    });
    if from >= to {
        return Err(ApiError::BadRequest("from must be before to".into()));
    }
    let points = q.points.unwrap_or(1000);
    if !(1..=MAX_POINTS).contains(&points) {
        return Err(ApiError::BadRequest(format!(
            "points must be from 1 to {MAX_POINTS}"
        )));
    }
    let ids = state.store.history().gpu_ids().await?;
    let cards: Vec<(&(String, String), &i64)> = match q.gpu.as_deref() {
        None | Some("all") => ids.iter().collect(),
        Some(uuid) => {
            let found: Vec<_> = ids.iter().filter(|((_, u), _)| u == uuid).collect();
            if found.is_empty() {
                return Err(ApiError::NotFound(format!("no GPU {uuid:?}").into()));
            }
            found
        }
    };
    let (from_s, to_s) = (from.timestamp(), to.timestamp().max(from.timestamp() + 1));
    let plan = history::plan(
        from_s,
        to_s,
        points,
        &state.history.retention,
        now.timestamp(),
    );
    let card_ids: Vec<i64> = cards.iter().map(|(_, id)| **id).collect();
    // The cards' names side by side with their readings.
    let history = state.store.history();
    let inventory = state.store.inventory();
    let (mut found, names) = futures::future::try_join(
        history.read(&card_ids, metric, from_s, to_s, plan),
        inventory.card_index(),
    )
    .await?;
    let scale = metric.scale();
    let mut series: Vec<HistorySeries> = cards
        .into_iter()
        .map(|((node, uuid), id)| HistorySeries {
            node: node.clone(),
            uuid: uuid.clone(),
            index: names.index(node, uuid),
            points: found
                .remove(id)
                .unwrap_or_default()
                .into_iter()
                .map(|b| HistoryBucket {
                    t_ms: b.t * 1000,
                    min: b.min * scale,
                    avg: b.avg * scale,
                    max: b.max * scale,
                })
                .collect(),
        })
        .collect();
    // Node then index, as the dashboard and the calendar list them.
    series.sort_by(|a, b| {
        (&a.node, a.index.unwrap_or(u32::MAX), &a.uuid).cmp(&(
            &b.node,
            b.index.unwrap_or(u32::MAX),
            &b.uuid,
        ))
    });
    Ok(Json(HistoryAnswer {
        metric: q.metric.unwrap_or_else(|| "utilization".into()),
        resolution: serde_json::to_value(plan.resolution)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        bucket_s: plan.bucket_s,
        from_ms: from_s * 1000,
        to_ms: to_s * 1000,
        series,
    }))
}
