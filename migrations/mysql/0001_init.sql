-- budgetd's MySQL/MariaDB schema, version 1 (docs/mysql.md).
--
-- MySQL commits every DDL statement on its own, so a file cannot be applied in
-- one transaction as PostgreSQL's are: every statement here is idempotent
-- (IF NOT EXISTS, DROP … IF EXISTS before CREATE), and the runner records the
-- file only after its last statement, so a start that failed half-way finishes
-- the file on the next start.
--
-- Names and keys are VARBINARY so that they compare and sort by their bytes,
-- as the Go stores do; amounts are DECIMAL(40,12), a level's 12 fractional
-- digits, never DOUBLE; times are microseconds since the epoch (UTC) as
-- BIGINT, read from the server's UTC_TIMESTAMP(6), so that no session time
-- zone can change them.

-- One row per limit. rev grows with every change of the limit: a decision
-- that read the limit at one rev commits only while it is still that rev.
CREATE TABLE IF NOT EXISTS budgetd_limits (
  id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  name       VARBINARY(64) NOT NULL,
  rev        BIGINT UNSIGNED NOT NULL,
  spec       LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_us BIGINT NOT NULL,
  updated_us BIGINT NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY budgetd_limits_name (name)
) ENGINE=InnoDB;

-- One row per written bucket: the state package bucket computed last (level,
-- time, and in extra the holds, window slots and threshold marks as JSON with
-- exact decimal strings, NULL when there are none; also its grants), a version that every
-- write bumps (compare-and-set), hseq, the last history entry id the bucket
-- gave, and last_us, the time of its last write (a later decision's "now" is
-- never before it, so the bucket's history never runs back in id order).
CREATE TABLE IF NOT EXISTS budgetd_buckets (
  limit_id   BIGINT UNSIGNED NOT NULL,
  bkey       VARBINARY(256) NOT NULL,
  version    BIGINT UNSIGNED NOT NULL,
  level      DECIMAL(40,12) NOT NULL,
  updated_us BIGINT NOT NULL,
  extra      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  hseq       BIGINT UNSIGNED NOT NULL,
  last_us    BIGINT NOT NULL,
  PRIMARY KEY (limit_id, bkey)
) ENGINE=InnoDB;

-- A bucket's history, clustered by bucket; seq is the entry's id, given by
-- the bucket (budgetd_buckets.hseq) under its compare-and-set.
CREATE TABLE IF NOT EXISTS budgetd_history (
  limit_id       BIGINT UNSIGNED NOT NULL,
  bkey           VARBINARY(256) NOT NULL,
  seq            BIGINT UNSIGNED NOT NULL,
  at_us          BIGINT NOT NULL,
  event          VARCHAR(16) CHARACTER SET ascii NOT NULL,
  amount         DECIMAL(40,12) NOT NULL,
  reservation_id VARBINARY(128) NULL,
  grant_id       VARBINARY(64) NULL,
  meta           LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  shadow_denied  BOOLEAN NOT NULL DEFAULT FALSE,
  PRIMARY KEY (limit_id, bkey, seq),
  KEY budgetd_history_time (limit_id, bkey, at_us, seq)
) ENGINE=InnoDB;

-- Holds: every hold ever made until pruned, with its life cycle. The active
-- ones are also in their bucket's state (extra), which the rule reads; a hold
-- row changes only in the write that compare-and-sets its bucket.
CREATE TABLE IF NOT EXISTS budgetd_holds (
  id               VARBINARY(128) NOT NULL,
  limit_id         BIGINT UNSIGNED NOT NULL,
  bkey             VARBINARY(256) NOT NULL,
  amount           DECIMAL(40,12) NOT NULL,
  state            VARCHAR(16) CHARACTER SET ascii NOT NULL,
  committed_amount DECIMAL(40,12) NULL,
  created_us       BIGINT NOT NULL,
  expires_us       BIGINT NOT NULL,
  resolved_us      BIGINT NOT NULL,
  PRIMARY KEY (id),
  KEY budgetd_holds_bucket (limit_id, bkey)
) ENGINE=InnoDB;

-- Idempotency records: the outcome of a call with an Idempotency-Key, written
-- in the call's own write (so a concurrent duplicate meets the key, and
-- replays it once the first commits). id is the SHA-256 of the scope and the
-- key; limits lists the ids of the limits the call touched (",1,5,"), whose
-- deletion forgets the record.
CREATE TABLE IF NOT EXISTS budgetd_idempotency (
  id         BINARY(32) NOT NULL,
  hash       VARBINARY(128) NOT NULL,
  limits     VARBINARY(1024) NOT NULL,
  outcome    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_us BIGINT NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;

-- The events outbox. seq is given from the one row of budgetd_event_seq,
-- which a write that emits events updates last, just before its commit: the
-- writes that emit events commit one at a time in seq order, so a reader
-- never sees seq n+1 before n (an auto-increment would allow it). Events are
-- rare (a threshold crossed or recovered), so the one row is not a hot spot.
CREATE TABLE IF NOT EXISTS budgetd_event_seq (
  id TINYINT UNSIGNED NOT NULL,
  n  BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;
INSERT IGNORE INTO budgetd_event_seq (id, n) VALUES (1, 0);

CREATE TABLE IF NOT EXISTS budgetd_events (
  seq      BIGINT UNSIGNED NOT NULL,
  limit_id BIGINT UNSIGNED NOT NULL,
  bkey     VARBINARY(256) NOT NULL,
  at_us    BIGINT NOT NULL,
  body     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  PRIMARY KEY (seq),
  KEY budgetd_events_bucket (limit_id, bkey, seq)
) ENGINE=InnoDB;

-- budgetd_assert ends the statement, and so the rest of a multi-statement
-- write, with SQLSTATE 45000 when ok is not true: how a write says "what I
-- decided on has changed" without a round trip back to budgetd.
DROP FUNCTION IF EXISTS budgetd_assert;
CREATE FUNCTION budgetd_assert(ok BOOLEAN) RETURNS INT DETERMINISTIC NO SQL
BEGIN
  IF ok IS NOT TRUE THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'budgetd: conflict';
  END IF;
  RETURN 1;
END;
