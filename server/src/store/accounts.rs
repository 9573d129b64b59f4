//! SQL of accounts and groups.

use super::*;
use lanes_types::account::AccountSource;

repository!(
    /// Members and groups: who may sign in, with what password, language and role.
    Accounts, accounts
);

#[derive(sqlx::FromRow)]
pub(super) struct UserRow {
    id: i64,
    username: String,
    display_name: String,
    email: Option<String>,
    unix_user: Option<String>,
    role: String,
    enabled: i64,
    source: String,
    pending: i64,
}

impl TryFrom<UserRow> for User {
    type Error = StoreError;
    fn try_from(row: UserRow) -> Result<Self, StoreError> {
        let role: Role = row.role.parse().map_err(|e: String| unreadable(e))?;
        Ok(User {
            id: row.id,
            username: row.username,
            display_name: row.display_name,
            email: row.email,
            unix_user: row.unix_user,
            role,
            enabled: row.enabled != 0,
            source: row.source.parse().map_err(unreadable)?,
            pending: row.pending != 0,
        })
    }
}

pub(super) const USER_COLUMNS: &str =
    "id, username, display_name, email, unix_user, role, enabled, source, pending";

/// Where a new account signs in: its own password here, or the lab's directory (no password
/// here; made enabled or waiting for approval).
pub(super) enum Origin<'a> {
    Local {
        password_hash: &'a str,
    },
    Directory {
        source: AccountSource,
        external_id: &'a str,
        pending: bool,
    },
}

impl Accounts<'_> {
    /// Creates an account with an already hashed password, and audits it, in one transaction.
    pub async fn create(
        &self,
        new: &NewUser,
        password_hash: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<User, StoreError> {
        self.insert(new, Origin::Local { password_hash }, audit, now)
            .await
    }

    /// Inserts an account of either origin and audits it, in one transaction.
    pub(super) async fn insert(
        &self,
        new: &NewUser,
        origin: Origin<'_>,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<User, StoreError> {
        let (password_hash, source, external_id, pending) = match origin {
            Origin::Local { password_hash } => (password_hash, AccountSource::Local, None, false),
            Origin::Directory {
                source,
                external_id,
                pending,
            } => (
                crate::accounts::password::NO_PASSWORD,
                source,
                Some(external_id),
                pending,
            ),
        };
        let mut tx = self.begin().await?;
        let inserted = sqlx::query_as::<_, UserRow>(&format!(
            "INSERT INTO users (username, display_name, email, unix_user, role, password_hash,
                                password_changed_at, created_at, source, external_id, enabled,
                                pending)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10, $11)
             RETURNING {USER_COLUMNS}"
        ))
        .bind(&new.username)
        .bind(&new.display_name)
        .bind(&new.email)
        .bind(&new.unix_user)
        .bind(new.role.as_str())
        .bind(password_hash)
        .bind(Stamp(now))
        .bind(source.as_str())
        .bind(external_id)
        .bind(flag(!pending))
        .bind(flag(pending))
        .fetch_one(&mut *tx)
        .await;
        let row = match inserted {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(StoreError::Conflict(match source {
                    AccountSource::Local => {
                        format!("a user named {:?} already exists", new.username)
                    }
                    _ => format!("the username {:?} belongs to another account", new.username),
                }))
            }
            other => other?,
        };
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        self.emit(Event::WatchChanged(Change::AccountsChanged));
        row.try_into()
    }

    pub async fn by_username(&self, username: &str) -> Result<Option<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE username = $1"
        ))
        .bind(username)
        .fetch_optional(&self.pool)
        .await?
        .map(User::try_from)
        .transpose()
    }

    /// Enabled admins; when there are none, the operator is told how to make one.
    pub async fn count_enabled_admins(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE role = 'admin' AND enabled = 1")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Whether any account exists (a new install has none: the login page says how the first
    /// admin is made).
    pub async fn any(&self) -> Result<bool, StoreError> {
        let found: Option<i64> = sqlx::query_scalar("SELECT id FROM users LIMIT 1")
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }

    /// An account and its password hash, for checking a login.
    pub async fn credentials(&self, username: &str) -> Result<Option<(User, String)>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Row {
            #[sqlx(flatten)]
            user: UserRow,
            password_hash: String,
        }
        sqlx::query_as::<_, Row>(&format!(
            "SELECT {USER_COLUMNS}, password_hash FROM users WHERE username = $1"
        ))
        .bind(username)
        .fetch_optional(&self.pool)
        .await?
        .map(|row| Ok((User::try_from(row.user)?, row.password_hash)))
        .transpose()
    }

    pub(super) async fn enabled_user(&self, user_id: i64) -> Result<Option<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE id = $1 AND enabled = 1"
        ))
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?
        .map(User::try_from)
        .transpose()
    }

    /// Every account, by username.
    pub async fn list(&self) -> Result<Vec<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!(
            "SELECT {USER_COLUMNS} FROM users ORDER BY username"
        ))
        .fetch_all(&self.pool)
        .await?
        .into_iter()
        .map(User::try_from)
        .collect()
    }

    pub async fn get(&self, id: i64) -> Result<Option<User>, StoreError> {
        sqlx::query_as::<_, UserRow>(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .map(User::try_from)
            .transpose()
    }

    /// The groups of each user, as (user id, group name) pairs.
    pub async fn memberships(&self) -> Result<Vec<(i64, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT m.user_id, g.name FROM group_members m JOIN groups g ON g.id = m.group_id
             ORDER BY g.name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The names of one user's groups, by name.
    pub async fn groups_of(&self, user_id: i64) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT g.name FROM group_members m JOIN groups g ON g.id = m.group_id
             WHERE m.user_id = $1 ORDER BY g.name",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The project a booking of `user_id`'s carries when it names none: the default (in
    /// `group_projects`, group → project) of the first of their groups, by name, that has one.
    pub async fn group_project(
        &self,
        group_projects: &std::collections::BTreeMap<String, String>,
        user_id: i64,
    ) -> Result<Option<String>, StoreError> {
        if group_projects.is_empty() {
            return Ok(None);
        }
        let groups = self.groups_of(user_id).await?;
        Ok(groups.iter().find_map(|g| group_projects.get(g)).cloned())
    }

    /// Applies an admin's change to an account in one transaction: fields, password (already
    /// hashed), groups, ending sessions when due, and the audit line. Refuses to leave the
    /// portal without an enabled admin.
    pub async fn update(
        &self,
        id: i64,
        patch: &UserPatch,
        password_hash: Option<&str>,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Option<User>, StoreError> {
        // Reads, then writes: IMMEDIATE, so no commit elsewhere can stale its snapshot.
        let mut tx = self.begin_immediate().await?;
        let exists: Option<(i64,)> = sqlx::query_as("SELECT id FROM users WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let clearable = |v: &Option<String>| v.as_ref().map(|s| (!s.is_empty()).then(|| s.clone()));
        sqlx::query(
            "UPDATE users SET
                display_name = COALESCE($2, display_name),
                email = CASE WHEN $3 THEN $4 ELSE email END,
                unix_user = CASE WHEN $5 THEN $6 ELSE unix_user END,
                role = COALESCE($7, role),
                enabled = COALESCE($8, enabled),
                pending = CASE WHEN $8 = 1 THEN 0 ELSE pending END,
                password_hash = COALESCE($9, password_hash),
                password_changed_at = CASE WHEN $9 IS NULL THEN password_changed_at ELSE $10 END
             WHERE id = $1",
        )
        .bind(id)
        .bind(&patch.display_name)
        .bind(patch.email.is_some())
        .bind(clearable(&patch.email).flatten())
        .bind(patch.unix_user.is_some())
        .bind(clearable(&patch.unix_user).flatten())
        .bind(patch.role.map(Role::as_str))
        .bind(patch.enabled.map(flag))
        .bind(password_hash)
        .bind(Stamp(now))
        .execute(&mut *tx)
        .await?;
        if let Some(groups) = &patch.groups {
            sqlx::query("DELETE FROM group_members WHERE user_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            for name in groups {
                let group_id: Option<i64> =
                    sqlx::query_scalar("SELECT id FROM groups WHERE name = $1")
                        .bind(name)
                        .fetch_optional(&mut *tx)
                        .await?;
                let Some(group_id) = group_id else {
                    return Err(StoreError::Invalid(format!("no group named {name:?}")));
                };
                sqlx::query(
                    "INSERT INTO group_members (group_id, user_id) VALUES ($1, $2)
                     ON CONFLICT DO NOTHING",
                )
                .bind(group_id)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            }
        }
        if patch.ends_sessions() {
            end_sessions_of(&mut tx, id).await?;
        }
        if patch.revokes_tokens() {
            revoke_tokens_of(&mut tx, id, now).await?;
        }
        let admins: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE role = 'admin' AND enabled = 1")
                .fetch_one(&mut *tx)
                .await?;
        if admins == 0 {
            return Err(StoreError::Conflict(
                "this would leave no enabled admin; make another admin first".into(),
            ));
        }
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        if patch.enabled.is_some() || patch.groups.is_some() {
            // Fair share and who may start weigh accounts and their groups.
            self.emit(Event::QueueChanged(Change::AccountChanged));
        }
        if patch.unix_user.is_some() {
            // The watchdog knows whose a process is by its Unix user.
            self.emit(Event::WatchChanged(Change::AccountsChanged));
        }
        self.get(id).await
    }

    /// Sets a user's own new password (already hashed) and ends all their sessions.
    pub async fn change_password(
        &self,
        user_id: i64,
        password_hash: &str,
        revoke_tokens: bool,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE users SET password_hash = $2, password_changed_at = $3 WHERE id = $1")
            .bind(user_id)
            .bind(password_hash)
            .bind(Stamp(now))
            .execute(&mut *tx)
            .await?;
        end_sessions_of(&mut tx, user_id).await?;
        if revoke_tokens {
            revoke_tokens_of(&mut tx, user_id, now).await?;
        }
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The interface language a user chose (`en`, `zh`), if any.
    pub async fn language_of(&self, user_id: i64) -> Result<Option<String>, StoreError> {
        let language: Option<Option<String>> =
            sqlx::query_scalar("SELECT language FROM users WHERE id = $1")
                .bind(user_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(language.flatten())
    }

    /// Remembers the interface language a user chose, audited.
    pub async fn set_language(
        &self,
        user_id: i64,
        language: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE users SET language = $2 WHERE id = $1")
            .bind(user_id)
            .bind(language)
            .execute(&mut *tx)
            .await?;
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn create_group(
        &self,
        name: &str,
        description: &str,
        audit: &AuditEntry,
        now: DateTime<Utc>,
    ) -> Result<Group, StoreError> {
        let mut tx = self.begin().await?;
        let inserted: Result<(i64,), sqlx::Error> = sqlx::query_as(
            "INSERT INTO groups (name, description, created_at) VALUES ($1, $2, $3) RETURNING id",
        )
        .bind(name)
        .bind(description)
        .bind(Stamp(now))
        .fetch_one(&mut *tx)
        .await;
        let (id,) = match inserted {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(StoreError::Conflict(format!(
                    "a group named {name:?} already exists"
                )))
            }
            other => other?,
        };
        insert_audit(&mut tx, audit, now).await?;
        tx.commit().await?;
        Ok(Group {
            id,
            name: name.into(),
            description: description.into(),
            members: Vec::new(),
        })
    }

    /// Every group with its members, by name.
    pub async fn groups(&self) -> Result<Vec<Group>, StoreError> {
        let rows: Vec<(i64, String, String, Option<String>)> = sqlx::query_as(
            "SELECT g.id, g.name, g.description, u.username FROM groups g
             LEFT JOIN group_members m ON m.group_id = g.id
             LEFT JOIN users u ON u.id = m.user_id
             ORDER BY g.name, u.username",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut groups: Vec<Group> = Vec::new();
        for (id, name, description, member) in rows {
            if groups.last().is_none_or(|g| g.id != id) {
                groups.push(Group {
                    id,
                    name,
                    description,
                    members: Vec::new(),
                });
            }
            if let (Some(group), Some(member)) = (groups.last_mut(), member) {
                group.members.push(member);
            }
        }
        Ok(groups)
    }
}

impl Accounts<'_> {
    /// When an account was made.
    pub async fn created_at(&self, user_id: i64) -> Result<Option<DateTime<Utc>>, StoreError> {
        let at: Option<Stamp> = sqlx::query_scalar("SELECT created_at FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(at.map(|s| s.0))
    }
}
