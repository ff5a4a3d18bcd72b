-- A bucket's most recent events (the dashboard's view of a bucket,
-- GET /v1/limits/{name}/buckets/{key}/events): found by bucket, newest first.
CREATE INDEX events_bucket ON events (limit_name, key, pos);
