-- The mode's ceiling comes from Go too (issue 42): budgetd passes, with a
-- bucket's terms, how the limit's mode scales its capacity into the ceiling
-- (ledger.Limit.CeilingScale: 1 under enforce, 1 + grace/100 under soft;
-- NULL under shadow, whose ceiling is budgetd_max_level()). The functions
-- scale the capacity they decide with, grants and rollover received
-- included, by it (budgetd_ceiling) and no longer read the mode for it.
ALTER TYPE budgetd_terms_arg ADD ATTRIBUTE ceiling_scale numeric;
