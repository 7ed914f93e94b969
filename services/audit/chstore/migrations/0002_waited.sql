-- How long a grant's or handoff's request waited for the key (ms, at
-- least 1; 0 when it did not wait), from the hold record the grant wrote
-- (audit.Event.WaitedMs). Rows stored before this version read 0.
ALTER TABLE events ADD COLUMN waited_ms Int64 DEFAULT 0 AFTER prev_session;
