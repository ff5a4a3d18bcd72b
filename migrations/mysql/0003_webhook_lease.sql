-- budgetd's MySQL/MariaDB schema, version 3: leases (ledger.LeaseStore; SPEC
-- "Alerts before the cap", Push; internal/mysql/lease.go, docs/mysql.md
-- "Webhooks"), as PostgreSQL's table leases (migrations/0012).
--
-- One row per named lease. holder holds it until expires_us, microseconds
-- since the epoch on the database's clock (UTC_TIMESTAMP(6)), so that budgetd
-- instances with skewed clocks agree ('' and 0: free). event_cursor is where
-- the holder's work got to (for the lease "webhook": the outbox cursor before
-- the oldest event not yet delivered or given up), moved only by the holder
-- while its lease has not expired, kept across holders.
--
-- Idempotent (IF NOT EXISTS), as the runner needs (0001_init.sql).
CREATE TABLE IF NOT EXISTS budgetd_leases (
  name         VARBINARY(200) NOT NULL,
  holder       VARBINARY(300) NOT NULL DEFAULT '',
  expires_us   BIGINT NOT NULL DEFAULT 0,
  event_cursor VARBINARY(1024) NOT NULL DEFAULT '',
  PRIMARY KEY (name)
) ENGINE=InnoDB;
