-- Limit modes (SPEC "Alerts before the cap", "Modes"): what a limit does with
-- a cost that does not fit its capacity. 'enforce' denies it (what every
-- limit did before, the default); 'shadow' accepts and charges it up to the
-- largest level a bucket keeps; 'soft' accepts it while level + held stays
-- within capacity × (1 + grace/100). grace is a percentage from 0 to 100 with
-- at most 2 decimals, zero unless the mode is 'soft' (ledger.validateMode).
-- The functions take the mode's ceiling from budgetd_ceiling.
ALTER TABLE limits ADD COLUMN mode text NOT NULL DEFAULT 'enforce' CHECK (mode IN ('enforce', 'shadow', 'soft'));
ALTER TABLE limits ADD COLUMN grace numeric NOT NULL DEFAULT 0;
ALTER TABLE limits ADD CONSTRAINT limits_grace CHECK (
    grace >= 0 AND grace <= 100 AND grace = round(grace, 2) AND (mode = 'soft' OR grace = 0));
