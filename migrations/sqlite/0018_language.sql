-- The interface language a member chose (issue 22): `en` or `zh`, NULL for the browser's;
-- the same change as ../postgres/0006_language.sql.
ALTER TABLE users ADD COLUMN language TEXT;
