//! SQL of personal notifications: members' choices, the outbox (claimed, retried, marked sent or
//! failed) and the one-click links in messages.

use super::*;
use lanes_types::notify::{NotifyPrefs, NotifySettings};

repository!(
    /// What the lab and each member want to be told, and how.
    Notifications, notifications
);

impl Notifications<'_> {
    /// The notification settings, or the defaults when none were saved.
    pub async fn settings(&self) -> Result<NotifySettings, StoreError> {
        self.store.settings().get("notify").await
    }

    /// Replaces the notification settings and audits the change, in one step.
    pub async fn save_settings(
        &self,
        settings: &NotifySettings,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.store
            .settings()
            .save("notify", settings, audit, now)
            .await
    }

    /// A member's choices (the defaults when they made none).
    pub async fn prefs(&self, user_id: i64) -> Result<NotifyPrefs, StoreError> {
        let value: Option<String> =
            sqlx::query_scalar("SELECT value FROM notify_prefs WHERE user_id = $1")
                .bind(user_id)
                .fetch_optional(&self.pool)
                .await?;
        match value {
            Some(json) => serde_json::from_str(&json).map_err(unreadable),
            None => Ok(NotifyPrefs::default()),
        }
    }

    /// Replaces a member's choices and audits the change, in one step.
    pub async fn save_prefs(
        &self,
        user_id: i64,
        prefs: &NotifyPrefs,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(prefs)
            .map_err(|e| StoreError::Database(format!("cannot store a value: {e}")))?;
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO notify_prefs (user_id, value) VALUES ($1, $2)
             ON CONFLICT (user_id) DO UPDATE SET value = excluded.value",
        )
        .bind(user_id)
        .bind(json)
        .execute(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }
}
