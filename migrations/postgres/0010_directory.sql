-- Directory accounts (issue 43): people who sign in through the lab's OpenID Connect provider
-- or LDAP directory.
--
-- `users.source`: where the account signs in (`local`: a password kept here). `external_id`:
-- who the directory says it is (the OIDC issuer and subject, the LDAP entry's DN), so that a
-- renamed person keeps their account and no one takes another's by choosing its username.
-- `pending`: made at a first sign-in, waiting for an admin to enable it.
ALTER TABLE users ADD COLUMN source TEXT NOT NULL DEFAULT 'local'
    CHECK (source IN ('local', 'oidc', 'ldap'));
ALTER TABLE users ADD COLUMN external_id TEXT;
ALTER TABLE users ADD COLUMN pending BIGINT NOT NULL DEFAULT 0 CHECK (pending IN (0, 1));
CREATE UNIQUE INDEX users_external_id ON users (source, external_id)
    WHERE external_id IS NOT NULL;

-- Sign-ins under way at the OpenID provider: a browser's (its state, nonce, PKCE verifier and
-- where to go after) or a terminal's device code. Keyed by a SHA-256 of the state or handle;
-- each is taken once, and only before it expires.
CREATE TABLE sign_in_flows (
    key_hash    TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('browser', 'device')),
    detail      TEXT NOT NULL,
    expires_at  TEXT NOT NULL
);

-- One-time codes for `lanes login`, made on the account page; only a SHA-256 is kept.
CREATE TABLE terminal_codes (
    code_hash   TEXT PRIMARY KEY,
    user_id     BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    expires_at  TEXT NOT NULL
);
