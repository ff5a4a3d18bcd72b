-- The end of a temporary rule change (ledger.SettleExpiries; docs/terms.md
-- "The end of a temporary override"): the state (p_level, p_updated, p_idx,
-- p_sum) of the bucket p_key of the limit p_l (its stored row: no override
-- applied), last written at p_updated, settled at each instant T in
-- (p_updated, p_now] at which the override in force expired and the rule
-- changed, from the old rule to the one that follows, as a PUT of the limit
-- settles (bucket.Switch): the time before T under the old rule, the slots
-- dropped, the bucket's time T. It walks the chain while the override that
-- follows expired too. switched tells whether anything changed; when not,
-- the state comes back as given. A decision calls it only when
-- limits.override_rules and override_expiry > p_updated (migration 0018):
-- a limit without overrides, or whose overrides change no rule or have no
-- expiry, pays nothing.
--
-- A periodic rule's table of period starts (limits.period_starts, an
-- override's own) holds the periods from the one before it was made; an
-- expiry before it lies at least a period before now, so the level it kept
-- would not count in the new rule's current period: it is settled to 0
-- rather than asking for a table of the past (period_table would be asked
-- again at every call).
CREATE OR REPLACE FUNCTION budgetd_expiry_switch(p_l limits, p_key text, p_level numeric, p_updated timestamptz,
                                                 p_idx bigint[], p_sum numeric[], p_now timestamptz,
                                                 OUT level numeric, OUT updated_at timestamptz, OUT slot_idx bigint[],
                                                 OUT slot_sum numeric[], OUT switched boolean)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_t     timestamptz := p_updated;
    v_o     overrides;
    v_old   limits;
    v_next  limits;
    v_start bigint;
BEGIN
    level := p_level;
    updated_at := p_updated;
    slot_idx := p_idx;
    slot_sum := p_sum;
    switched := false;
    IF p_updated IS NULL OR NOT p_l.override_rules OR NOT p_l.override_expiry > p_updated
       OR coalesce(cardinality(p_l.override_lens), 0) = 0 THEN
        RETURN;
    END IF;
    LOOP
        v_o := budgetd_override_of(p_l.id, p_l.override_lens, p_key, v_t);
        EXIT WHEN v_o.limit_id IS NULL OR v_o.expires_at IS NULL OR v_o.expires_at > p_now;
        v_old := budgetd_with_override(p_l, v_o, p_now);
        v_t := v_o.expires_at;
        v_next := budgetd_with_override(p_l, budgetd_override_of(p_l.id, p_l.override_lens, p_key, v_t), p_now);
        IF (v_next.leak_amount, v_next.leak_per_us, v_next.period_tz, v_next.period_start_day,
            v_next.window_length_us, v_next.window_precision_us)
           IS DISTINCT FROM
           (v_old.leak_amount, v_old.leak_per_us, v_old.period_tz, v_old.period_start_day,
            v_old.window_length_us, v_old.window_precision_us) THEN
            v_start := budgetd_period_start(v_old, v_t, false);
            IF v_old.period_every IS NOT NULL AND v_start IS NULL THEN
                level := 0;
            ELSE
                level := trim_scale(budgetd_level_at(level, updated_at, v_old.leak_amount, v_old.leak_per_us, v_t, v_start,
                                                     v_old.window_length_us, v_old.window_precision_us, slot_idx, slot_sum));
            END IF;
            slot_idx := NULL;
            slot_sum := NULL;
            IF updated_at IS NULL OR v_t > updated_at THEN
                updated_at := v_t;
            END IF;
            switched := true;
        END IF;
    END LOOP;
END $$;

-- Settles the locked bucket p_key of p_l (its stored row) at the expiries
-- it crossed (budgetd_expiry_switch) and writes it, so that everything the
-- call then reads or writes builds on the settled state, as a PUT of the
-- limit at those instants would have left it. Every function that writes a
-- bucket calls it right after the lock, before budgetd_terms; the
-- coalesced path (budgetd_fillup_batch) does the same inline. Returns
-- whether it wrote.
CREATE OR REPLACE FUNCTION budgetd_settle_expiries(p_l limits, p_key text, p_now timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_b buckets;
    v_s record;
BEGIN
    IF NOT p_l.override_rules OR p_l.override_expiry IS NULL THEN
        RETURN false;
    END IF;
    SELECT * INTO v_b FROM buckets WHERE limit_id = p_l.id AND key = p_key;
    IF NOT v_b.updated_at < p_l.override_expiry THEN
        RETURN false;
    END IF;
    SELECT * INTO v_s FROM budgetd_expiry_switch(p_l, p_key, v_b.level, v_b.updated_at, v_b.slot_idx, v_b.slot_sum, p_now);
    IF v_s.switched THEN
        UPDATE buckets SET level = v_s.level, updated_at = v_s.updated_at, slot_idx = NULL, slot_sum = NULL
         WHERE limit_id = p_l.id AND key = p_key;
    END IF;
    RETURN v_s.switched;
END $$;

-- budgetd_state_json of the bucket p_key of p_l (its stored row) as a read
-- at p_now sees it: settled at the expiries it crossed, writing nothing.
CREATE OR REPLACE FUNCTION budgetd_expiry_state_json(p_l limits, p_key text, p_now timestamptz) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_j jsonb := budgetd_state_json(p_l.id, p_key);
    v_b buckets;
    v_s record;
BEGIN
    IF NOT p_l.override_rules OR p_l.override_expiry IS NULL THEN
        RETURN v_j;
    END IF;
    SELECT * INTO v_b FROM buckets WHERE limit_id = p_l.id AND key = p_key;
    IF NOT v_b.updated_at < p_l.override_expiry THEN
        RETURN v_j;
    END IF;
    SELECT * INTO v_s FROM budgetd_expiry_switch(p_l, p_key, v_b.level, v_b.updated_at, v_b.slot_idx, v_b.slot_sum, p_now);
    IF v_s.switched THEN
        v_j := (v_j - 'slot_idx' - 'slot_sums')
               || jsonb_build_object('level', v_s.level::text, 'updated_us', budgetd_us(v_s.updated_at));
    END IF;
    RETURN v_j;
END $$;
