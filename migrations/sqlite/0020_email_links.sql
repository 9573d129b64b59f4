-- A member's own new e-mail address waits in the link sent to it (issue 41): the address is
-- used once the member opens that link, so nobody can have Lanes write to an address they do
-- not read. The same change as ../postgres/0008_email_links.sql.
ALTER TABLE action_links ADD COLUMN email TEXT;
