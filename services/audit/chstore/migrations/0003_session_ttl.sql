-- A session's lease TTL on its own events (session_open, and the close or
-- expiry of its record), from the session record (audit.Event.TTLSeconds):
-- the cost report estimates keepalives from it. Rows stored before this
-- version read 0, and their sessions are not estimated.
ALTER TABLE events ADD COLUMN ttl_seconds Int64 DEFAULT 0 AFTER waited_ms;
