//! SQL of settings admins change at run time: each a JSON document under a key, read with its
//! default when none was saved, replaced and audited in one step.

use super::*;

repository!(
    /// Settings admins change at run time, each a JSON document under a key.
    Settings, settings
);

impl Settings<'_> {
    /// The portal settings, or the defaults when none were saved.
    pub async fn portal(&self) -> Result<PortalSettings, StoreError> {
        self.get("portal").await
    }

    /// Replaces the portal settings and audits the change, in one step.
    pub async fn save_portal(
        &self,
        settings: &PortalSettings,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.save("portal", settings, audit, now).await
    }

    /// The setting `key` (a JSON document), or its default when none was saved.
    pub(crate) async fn get<T: serde::de::DeserializeOwned + Default>(
        &self,
        key: &str,
    ) -> Result<T, StoreError> {
        let value: Option<String> = sqlx::query_scalar("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        match value {
            Some(json) => serde_json::from_str(&json).map_err(unreadable),
            None => Ok(T::default()),
        }
    }

    /// Replaces the setting `key` and audits the change, in one step.
    pub(crate) async fn save<T: serde::Serialize>(
        &self,
        key: &str,
        value: &T,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(value)
            .map_err(|e| StoreError::Database(format!("cannot store a value: {e}")))?;
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(json)
        .execute(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        // Other nodes keep settings in memory: they read them again.
        self.emit(Event::WatchChanged(Change::SettingsChanged));
        Ok(())
    }
}
