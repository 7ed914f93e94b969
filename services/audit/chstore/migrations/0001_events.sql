-- Audit events, one row per (cluster, revision, key). A replayed revision
-- is inserted again with a later `ingested`; ReplacingMergeTree keeps one
-- row per sorting key and queries read with FINAL.
-- ClickHouse 18.16 has no DateTime64: the time is at_ms (Unix ms, UTC),
-- and `at` (seconds) is derived from it to partition by month.
CREATE TABLE IF NOT EXISTS events (
    cluster_id    String,
    cluster       String,
    revision      Int64,
    key           String,
    kind          String,
    at_ms         Int64,
    at            DateTime MATERIALIZED toDateTime(intDiv(at_ms, 1000)),
    namespace     String,
    class         String,
    identity      String,
    instance      String,
    session       Int64,
    prev_identity String,
    prev_session  Int64,
    epoch         UInt32,
    detail        String,
    ingested      UInt64
) ENGINE = ReplacingMergeTree(ingested)
PARTITION BY toYYYYMM(at)
ORDER BY (cluster_id, revision, key);
