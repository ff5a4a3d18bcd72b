-- The end of a temporary rule change (SPEC "Terms per customer": from
-- expires_at the limit's terms apply again, settled as a PUT of the limit
-- settles; docs/terms.md). A bucket whose override expired since its last
-- write is settled at each expires_at whose rule change it crossed
-- (budgetd_expiry_switch, the SQL of ledger.SettleExpiries). Two columns
-- tell a decision, for free, that no bucket of the limit can have crossed
-- such an expiry, so that it does not look:
--   override_rules: some override of the limit sets a rule term (a leak, a
--     period's tz or start_day, a window's length), so an expiry may change
--     a bucket's rule (when none does, an expiry changes a capacity only);
--   override_expiry: the latest expires_at ever put for the limit's
--     overrides (NULL: none was temporary); a bucket written at or after it
--     crossed no expiry.
-- Both only grow while the limit lives (a DELETE of an override leaves them):
-- they bound when to look, the overrides' rows decide.
ALTER TABLE limits ADD COLUMN override_rules boolean NOT NULL DEFAULT false;
ALTER TABLE limits ADD COLUMN override_expiry timestamptz;
UPDATE limits l
   SET override_rules = EXISTS (SELECT 1 FROM overrides o
                                 WHERE o.limit_id = l.id
                                   AND (o.leak_per_us IS NOT NULL OR o.period_tz IS NOT NULL
                                        OR o.period_start_day IS NOT NULL OR o.window_length_us IS NOT NULL)),
       override_expiry = (SELECT max(o.expires_at) FROM overrides o WHERE o.limit_id = l.id)
 WHERE cardinality(l.override_lens) > 0;
