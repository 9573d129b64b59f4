-- Sign-ins under way are swept by their expiry on every new one (issue 68): without an index
-- each sweep read the whole table, which anonymous starts could fill.
CREATE INDEX sign_in_flows_expires_at ON sign_in_flows (expires_at);
CREATE INDEX terminal_codes_expires_at ON terminal_codes (expires_at);
