package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
)

// The set-based batch (issue 44, step 2; WithSetBatch, off by default) decides a coalesced batch of the
// common kind in Go, with package bucket as the memory and MySQL stores do, and reads and writes the
// database set-wise instead of calling budgetd_fillup_batch once per bucket:
//
//   - round trip 1: BEGIN; lock the batch's existing bucket rows in one statement, in (limit_id, key) order
//     as every call locks them; then, in a statement of its own (so at READ COMMITTED it sees whatever
//     committed before the locks were granted), the database's now, each limit's version, each bucket's active grants
//     and holds;
//   - the decision, per bucket in arrival order at that one instant, exactly as budgetd_fillup_batch makes
//     it (bucket.Fillup on the state the previous call left);
//   - round trip 2: the written buckets in one UPDATE and one INSERT, the history entries in one INSERT,
//     COMMIT.
//
// A batch goes this way only when everything about it is the common case, known in Go before it is sent:
// READ COMMITTED, more than one call, and limits in the terms index that are leaky or periodic, without
// rollover; each key is decided on its terms (ledger.TermsAt) from the index's overrides and
// the bucket's active grants, read under the locks, and its threshold marks kept by ledger.Watch.Cross
// (setBucket.cross). A call's Idempotency-Key is decided as budgetd_fillup_batch decides it:
// a later call of the batch with the key replays the first (same request) or is refused; the first writes
// the record, in the statement that writes the history, with its entry's id. What only the read can tell sends it the usual way
// after a ROLLBACK, nothing written: a limit or its overrides changed or deleted since the index read
// them, a bucket an override's end has to settle first, expired
// holds to record, a threshold crossed or left (budgetd_cross emits its event), a clock stepped back, a window's slots left on a row, a denial on a bucket without a
// row (budgetd_batch_write proves that one under a placeholder's lock), or a live idempotency record of one
// of the batch's keys (the function replays it). A bucket row another session
// created between the read and the write fails the INSERT (unique violation): the whole attempt is rolled
// back and made again, and then finds the row and locks it.

// WithSetBatch turns the set-based batch on or off (off by default while it is measured; issue 44).
func WithSetBatch(on bool) Option { return func(c *config) { c.setBatch = on } }

// errSetFallback: the set-based batch rolled back without writing; the batch goes through budgetd_fillup.
var errSetFallback = errors.New("postgres: batch not decidable set-wise")

// setBucket is one bucket of a set-based batch: its limit, its calls in
// arrival order and what the read found.
type setBucket struct {
	lt     *limitTerms
	key    string
	calls  []*fillCall
	grants []ledger.Grant // its active grants
	eff    ledger.Limit   // the effective limit at the batch's now: ledger.TermsAt's
	watch  *ledger.Watch  // its thresholds at its capacity; nil for none
	found  bool           // a row exists (a placeholder included)
	slots  bool           // the row has a window's slots
	state  bucket.State
	marks  ledger.Marks // the threshold marks, as read and then as the write sets them
	wrote  bool
	entry0 int // the first of its history entries in the batch's list
}

// setEligible reports whether every call of batch may go set-wise, by what
// the terms index knows; it reads a limit the index does not have yet.
//
// A batch of one goes set-wise only while another batch is at the database.
// On an idle store budgetd_fillup answers it in one round trip, against the
// set path's two; under load, its statements cost the database about three
// times the set path's (docs/postgres.md "Batches of one under load").
func (s *Store) setEligible(ctx context.Context, batch []*fillCall) bool {
	if !s.cfg.setBatch || s.cfg.isolation != string(ReadCommitted) || len(batch) < 2 && !s.othersAtDatabase() {
		return false
	}
	for _, c := range batch {
		lt, err := s.limitTerms(ctx, c.ref.Limit)
		if err != nil || lt == nil || lt.lim.Rollover != nil {
			return false
		}
	}
	return true
}

// othersAtDatabase reports whether more than one coalesced batch is at the
// database: the caller's and another.
func (s *Store) othersAtDatabase() bool {
	if s.co == nil {
		return false
	}
	inFlight, _ := s.co.Load()
	return inFlight > 1
}

// setPlanSQL makes the batch's statements, in its transaction, look rows
// up by the primary key one by one: no sequential scan, hash or merge join.
// A batch holds at most a few hundred rows of a table of any size, so that
// is the right plan whatever the statistics say; and the plan that pgx's
// prepared statement caches is made once, with the statistics of the
// moment. Made while the table was new or small (before autovacuum's first
// ANALYZE of it, a minute or more), it scanned the whole table for the lock
// and again for the UPDATE: 220 blocks a batch and three times the time
// (docs/postgres.md "The set-based batch").
//
// It also keeps those cached plans in use (plan_cache_mode): left to
// choose, PostgreSQL planned the UPDATE afresh at every execution, its
// generic plan's estimate being above the custom ones', and spent more time
// planning it than running it (docs/postgres.md "Generic plans for the
// set-based batch").
const setPlanSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true)`

const setLockSQL = `SELECT b.limit_id, b.key, b.level::text, budgetd_us(b.updated_at), b.slot_idx, b.slot_sum::text[],
       b.th_sig, b.th_above, b.th_period
  FROM buckets b
 WHERE (b.limit_id, b.key) IN (SELECT u.l, u.k FROM unnest($1::bigint[], $2::text[]) AS u(l, k))
 ORDER BY b.limit_id, b.key
   FOR UPDATE`

const setReadSQL = `WITH t AS MATERIALIZED (SELECT coalesce($3::timestamptz, budgetd_clock()) AS now),
     r AS MATERIALIZED (
        SELECT count(*) AS n FROM unnest($4::text[], $5::text[]) AS q(s, k)
          JOIN idempotency i ON i.scope = q.s AND i.key = q.k, t
         WHERE i.created_at > t.now - budgetd_idempotency_ttl() AND budgetd_limits_exist(i.limit_ids))
SELECT u.i::int, budgetd_us(t.now), r.n, l.id IS NOT NULL, coalesce(budgetd_us(l.updated_at), 0), coalesce(l.override_ver, 0),
       coalesce(h.amounts, '{}'), coalesce(h.expires, '{}'), coalesce(h.expired, 0),
       coalesce(g.amounts, '{}'), coalesce(g.expires, '{}')
  FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS u(l, k, i)
 CROSS JOIN t CROSS JOIN r
  LEFT JOIN limits l ON l.id = u.l
  LEFT JOIN LATERAL (
        SELECT array_agg(h.amount::text ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > t.now) AS amounts,
               array_agg(budgetd_us(h.expires_at) ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > t.now) AS expires,
               count(*) FILTER (WHERE h.expires_at <= t.now) AS expired
          FROM holds h WHERE h.limit_id = u.l AND h.key = u.k AND h.state = 'active') h ON true
  LEFT JOIN LATERAL (
        SELECT array_agg(g.amount::text ORDER BY g.id) AS amounts, array_agg(budgetd_us(g.expires_at) ORDER BY g.id) AS expires
          FROM grants g WHERE l.grant_rows > 0 AND g.limit_id = u.l AND g.key = u.k AND g.expires_at > t.now) g ON true
 ORDER BY u.i`

// setUpdateSQL and setInsertSQL take each row's slots as array literals
// ($8, $9: '{…}' text, NULL for none), since rows have different numbers of
// them.
const setUpdateSQL = `UPDATE buckets b SET level = u.v::numeric, updated_at = budgetd_from_us(u.t),
       th_sig = u.ts, th_above = u.ta, th_period = u.tp, slot_idx = u.si::bigint[], slot_sum = u.ss::numeric[]
  FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::smallint[], $7::bigint[], $8::text[], $9::text[])
       AS u(l, k, v, t, ts, ta, tp, si, ss)
 WHERE b.limit_id = u.l AND b.key = u.k`

const setInsertSQL = `INSERT INTO buckets (limit_id, key, level, updated_at, th_sig, th_above, th_period, slot_idx, slot_sum)
SELECT u.l, u.k, u.v::numeric, budgetd_from_us(u.t), u.ts, u.ta, u.tp, u.si::bigint[], u.ss::numeric[]
  FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::smallint[], $7::bigint[], $8::text[], $9::text[])
       AS u(l, k, v, t, ts, ta, tp, si, ss)`

const setHistorySQL = `INSERT INTO history (limit_id, key, at, event, amount, reservation_id, meta, shadow_denied)
SELECT u.l, u.k, budgetd_from_us($1), u.e, u.c::numeric, NULL, nullif(u.m, '')::jsonb, u.s
  FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::boolean[]) WITH ORDINALITY AS u(l, k, e, c, m, s, o)
 ORDER BY u.o
RETURNING id`

// setRecordSQL writes the history entries (as setHistorySQL) and the
// idempotency records ($8…: scope, key, hash, limit id, the outcome
// document, the position of its history entry, 0 for none; the entry's id
// is set in the document as budgetd_fillup_batch sets it) in one
// statement, and returns the entries' ids in order. A record another call
// committed first is not replaced (as budgetd_fillup_batch's INSERT) and
// raises BD001 (budgetd_idem_race).
const setRecordSQL = `WITH h AS (
    INSERT INTO history (limit_id, key, at, event, amount, reservation_id, meta, shadow_denied)
    SELECT u.l, u.k, budgetd_from_us($1), u.e, u.c::numeric, NULL, nullif(u.m, '')::jsonb, u.s
      FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::boolean[]) WITH ORDINALITY AS u(l, k, e, c, m, s, o)
     ORDER BY u.o
    RETURNING id),
  hs AS (SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM h),
  ins AS (
    INSERT INTO idempotency AS i (scope, key, hash, limit_ids, outcome, created_at)
    SELECT u.s, u.k, u.h, ARRAY[u.l],
           CASE WHEN u.e > 0 THEN jsonb_set(u.d, '{items,0,entry_id}', to_jsonb(hs.ids[u.e]::text)) ELSE u.d END,
           budgetd_from_us($1)
      FROM unnest($8::text[], $9::text[], $10::text[], $11::bigint[], $12::jsonb[], $13::int[]) AS u(s, k, h, l, d, e) CROSS JOIN hs
    ON CONFLICT (scope, key) DO UPDATE
       SET hash = EXCLUDED.hash, limit_ids = EXCLUDED.limit_ids, outcome = EXCLUDED.outcome, created_at = EXCLUDED.created_at
     WHERE i.created_at <= EXCLUDED.created_at - budgetd_idempotency_ttl() OR NOT budgetd_limits_exist(i.limit_ids)
    RETURNING 1)
SELECT hs.ids, budgetd_idem_race((SELECT count(*) FROM ins), cardinality($8::text[])) FROM hs`

// setTrimSQL trims a bucket's history as budgetd_fillup_batch does when one
// of its new entries' ids is a multiple of 256.
const setTrimSQL = `DELETE FROM history WHERE id = ANY (ARRAY(
    SELECT id FROM history WHERE limit_id = $1 AND key = $2
     ORDER BY at DESC, id DESC OFFSET budgetd_history_cap() LIMIT 1000))`

// setBatch is a batch being decided set-wise, built once for all its
// attempts: its buckets in lock order, each with its calls in arrival
// order; its calls in the order of their answers (bucket by bucket); and
// what the statements take.
type setBatch struct {
	bs    []*setBucket
	calls []setCall
	rows  map[setRow]*setBucket
	ids   []int64  // per bucket
	keys  []string // per bucket
	// The batch's Idempotency-Keys, for the read of live records.
	idemScopes, idemKeys []string
}

// setCall is a call of a set-based batch and its bucket; setRow names a
// bucket row.
type (
	setCall struct {
		b *setBucket
		c *fillCall
	}
	setRow struct {
		id  int64
		key string
	}
)

// newSetBatch groups live by bucket; nil when a limit is not in the terms
// index.
func (s *Store) newSetBatch(ctx context.Context, live []*fillCall) *setBatch {
	sb := &setBatch{rows: map[setRow]*setBucket{}}
	at := map[ledger.BucketRef]*setBucket{}
	for _, c := range live {
		b := at[c.ref]
		if b == nil {
			lt, err := s.limitTerms(ctx, c.ref.Limit)
			if err != nil || lt == nil {
				return nil
			}
			b = &setBucket{lt: lt, key: c.ref.Key}
			at[c.ref] = b
			sb.bs = append(sb.bs, b)
		}
		b.calls = append(b.calls, c)
	}
	slices.SortFunc(sb.bs, func(a, b *setBucket) int {
		return cmp.Or(cmp.Compare(a.lt.id, b.lt.id), cmp.Compare(a.key, b.key))
	})
	for _, b := range sb.bs {
		sb.rows[setRow{b.lt.id, b.key}] = b
		sb.ids, sb.keys = append(sb.ids, b.lt.id), append(sb.keys, b.key)
		for _, c := range b.calls {
			sb.calls = append(sb.calls, setCall{b, c})
			if c.idem.Key != "" {
				sb.idemScopes, sb.idemKeys = append(sb.idemScopes, c.idem.Scope), append(sb.idemKeys, c.idem.Key)
			}
		}
	}
	return sb
}

// runSet decides live set-wise and answers each call; errSetFallback when
// the read found what only budgetd_fillup decides (nothing was written).
func (s *Store) runSet(ctx context.Context, deadline time.Time, live []*fillCall) error {
	sb := s.newSetBatch(ctx, live)
	if sb == nil {
		return errSetFallback
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(s.cfg.timeout)
	}
	var answers []setAnswer
	fallback := false
	err := s.doUntil(ctx, deadline, "fillup", func(ctx context.Context) error {
		var err error
		for range 3 {
			answers, err = s.setAttempt(ctx, sb)
			if !isUniqueViolation(err) {
				break
			}
		}
		if errors.Is(err, errSetFallback) {
			fallback = true
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if fallback {
		return errSetFallback
	}
	s.stats.setBatches.Add(1)
	for i, sc := range sb.calls {
		c := sc.c
		c.out, c.err = answers[i].out, nil
		if answers[i].code != "" {
			c.err = s.fail(ctx, "fillup", &pgconn.PgError{Severity: "ERROR", Code: answers[i].code,
				Message: fmt.Sprintf("idempotency key \"%s\" was used with a different request", c.idem.Key)})
		}
	}
	return nil
}

// setAnswer is a call's answer in a set-based batch: its outcome, or the
// code of its refusal (an Idempotency-Key reused with another request).
type setAnswer struct {
	out  ledger.FillupOutcome
	code string
}

// isUniqueViolation: a bucket row the batch inserts was created meanwhile.
func isUniqueViolation(err error) bool { return sqlState(err) == "23505" }

// setAttempt is one transaction of runSet: read under the locks, decide
// (decideSet), write. Its answers are in the order of sb.calls.
func (s *Store) setAttempt(ctx context.Context, sb *setBatch) (answers []setAnswer, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	open := false
	defer func() {
		if open && err != nil {
			// A failed round trip leaves the connection's transaction to
			// roll back; a broken connection is closed by the pool.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_, _ = conn.Exec(rctx, "ROLLBACK")
			cancel()
		}
	}()
	open = true
	nowUS, fallback, err := s.setRead(ctx, conn, sb)
	if err != nil {
		return nil, err
	}
	var p *setPlan
	if !fallback {
		p, fallback = decideSet(sb, fromUS(nowUS))
	}
	if fallback {
		open = false
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			return nil, err
		}
		return nil, errSetFallback
	}
	entryIDs, err := s.setWrite(ctx, conn, sb, p, nowUS)
	if err != nil {
		return nil, err
	}
	open = false
	for i, e := range p.entryOf {
		if e >= 0 {
			p.answers[i].out.Items[0].EntryID = strconv.FormatInt(entryIDs[e], 10)
		}
	}
	for i, j := range p.replayOf {
		if j >= 0 {
			p.answers[i].out = p.answers[j].out
			p.answers[i].out.Items = slices.Clone(p.answers[j].out.Items)
			p.answers[i].out.Replayed = true
		}
	}
	s.trimHistory(ctx, conn, entryIDs, p.hist.ids, p.hist.keys)
	return p.answers, nil
}

// setRead is round trip 1 of an attempt: BEGIN, lock the batch's rows,
// then read under the locks into its buckets. It returns the database's
// now, and whether what it read sends the batch to budgetd_fillup.
func (s *Store) setRead(ctx context.Context, conn *pgxpool.Conn, sb *setBatch) (nowUS int64, fallback bool, err error) {
	for _, b := range sb.bs {
		b.found, b.slots, b.state, b.wrote, b.grants, b.marks = false, false, bucket.State{}, false, nil, ledger.Marks{}
	}
	rb := &pgx.Batch{}
	rb.Queue("BEGIN")
	rb.Queue(setPlanSQL)
	rb.Queue(setLockSQL, sb.ids, sb.keys)
	rb.Queue(setReadSQL, sb.ids, sb.keys, s.nowArg(), sb.idemScopes, sb.idemKeys)
	res := conn.SendBatch(ctx, rb)
	defer res.Close()
	for range 2 { // BEGIN, setPlanSQL
		if _, err := res.Exec(); err != nil {
			return 0, false, err
		}
	}
	rows, err := res.Query()
	if err != nil {
		return 0, false, err
	}
	if err := readSetBuckets(rows, sb); err != nil {
		return 0, false, err
	}
	if rows, err = res.Query(); err != nil {
		return 0, false, err
	}
	if nowUS, fallback, err = s.readSetTerms(rows, sb); err != nil {
		return 0, false, err
	}
	if err := res.Close(); err != nil {
		return 0, false, err
	}
	s.sawNow(nowUS)
	return nowUS, fallback, nil
}

// readSetBuckets reads the locked rows of setLockSQL into the batch's
// buckets: level, slots and threshold marks. A bucket without a row stays
// not found.
func readSetBuckets(rows pgx.Rows, sb *setBatch) error {
	var (
		id         int64
		key, level string
		updated    *int64
		slotIdx    []int64
		slotSums   []string
		thSig      int32
		thAbove    int16
		thPeriod   int64
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &key, &level, &updated, &slotIdx, &slotSums, &thSig, &thAbove, &thPeriod}, func() error {
		b := sb.rows[setRow{id, key}]
		if b == nil {
			return nil
		}
		lv, ok := bucket.ParseAmount(level)
		if !ok {
			return fmt.Errorf("postgres fillup: decoding level %q: %w", level, errBadAnswer)
		}
		var err error
		b.found, b.slots = true, slotIdx != nil
		if b.state.Slots, err = slotsOf(slotIdx, slotSums); err != nil {
			return err
		}
		b.marks = ledger.Marks{Sig: uint32(thSig), Above: uint8(thAbove), Period: thPeriod}
		b.state.Level = lv
		if updated != nil {
			b.state.Updated = fromUS(*updated)
		}
		return nil
	})
	return err
}

// readSetTerms reads setReadSQL's row per bucket: the database's now, the
// bucket's holds and grants, and what sends the batch to budgetd_fillup
// (live idempotency records to replay, a limit changed since its terms
// were read, an expired hold, an amount the set path does not parse).
func (s *Store) readSetTerms(rows pgx.Rows, sb *setBatch) (nowUS int64, fallback bool, err error) {
	var (
		i                  int32
		live               int64 // live idempotency records of the batch's keys
		exists             bool
		rev, over, expired int64
		amounts, gAmounts  []string
		expires, gExpires  []int64
	)
	_, err = pgx.ForEachRow(rows, []any{&i, &nowUS, &live, &exists, &rev, &over, &amounts, &expires, &expired, &gAmounts, &gExpires}, func() error {
		b := sb.bs[i-1]
		if live > 0 {
			fallback = true // budgetd_fillup replays them
		}
		if !exists || rev != b.lt.rev || over != b.lt.over {
			s.terms.forget(b.lt.lim.Name)
			fallback = true
			return nil
		}
		if expired > 0 || len(amounts) != len(expires) || len(gAmounts) != len(gExpires) {
			fallback = true
			return nil
		}
		for j, a := range amounts {
			amount, ok := bucket.ParseAmount(a)
			if !ok {
				fallback = true
				return nil
			}
			b.state.Holds = append(b.state.Holds, bucket.Hold{Amount: amount, ExpiresAt: fromUS(expires[j])})
		}
		for j, a := range gAmounts {
			amount, err := decimal.NewFromString(a)
			if err != nil {
				return fmt.Errorf("postgres fillup: decoding a grant %q: %w", a, errBadAnswer)
			}
			b.grants = append(b.grants, ledger.Grant{Amount: amount, ExpiresAt: fromUS(gExpires[j])})
		}
		return nil
	})
	return nowUS, fallback, err
}

// setPlan is what decideSet decided: the answers, and the statements'
// arguments that write them.
type setPlan struct {
	answers []setAnswer
	// Per answer: its history entry's position in hist (-1 for none), and
	// the earlier answer it replays (-1 for none). recOf lists the answers
	// that write an idempotency record.
	entryOf, replayOf, recOf []int
	up, in                   setRows
	hist                     setHistory
}

// setRows are bucket rows to write, as setUpdateSQL and setInsertSQL take
// them.
type setRows struct {
	ids    []int64
	keys   []string
	levels []string
	times  []int64
	// The threshold marks: signature, reached thresholds, period.
	sigs    []int32
	aboves  []int16
	periods []int64
	// A window's slots as array literals (nil: none).
	slotIdx, slotSums []*string
}

func (r *setRows) add(b *setBucket) {
	r.ids, r.keys = append(r.ids, b.lt.id), append(r.keys, b.key)
	r.levels, r.times = append(r.levels, b.state.Level.String()), append(r.times, b.state.Updated.UnixMicro())
	r.sigs, r.aboves, r.periods = append(r.sigs, int32(b.marks.Sig)), append(r.aboves, int16(b.marks.Above)), append(r.periods, b.marks.Period)
	var idx, sums *string
	if b.eff.Window != nil && len(b.state.Slots) > 0 {
		idx, sums = slotLiterals(b.state.Slots)
	}
	r.slotIdx, r.slotSums = append(r.slotIdx, idx), append(r.slotSums, sums)
}

// slotLiterals are a window bucket's slots as array literals of their
// numbers and their sums.
func slotLiterals(slots []bucket.Slot) (idx, sums *string) {
	var bi, bs []byte
	bi, bs = append(bi, '{'), append(bs, '{')
	for i, sl := range slots {
		if i > 0 {
			bi, bs = append(bi, ','), append(bs, ',')
		}
		bi, bs = strconv.AppendInt(bi, sl.Index, 10), append(bs, sl.Sum.String()...)
	}
	i, s := string(append(bi, '}')), string(append(bs, '}'))
	return &i, &s
}

// args are r as setUpdateSQL and setInsertSQL take them.
func (r *setRows) args() []any {
	return []any{r.ids, r.keys, r.levels, r.times, r.sigs, r.aboves, r.periods, r.slotIdx, r.slotSums}
}

// setHistory are history entries to write, as setHistorySQL takes them.
type setHistory struct {
	ids                        []int64
	keys, events, costs, metas []string
	shadow                     []*bool
}

// decideSet decides the batch at now, bucket by bucket, each bucket's
// calls in arrival order, with bucket.Fillup on the state the previous
// call left, exactly as budgetd_fillup_batch decides them. It writes
// nothing but the buckets' states; fallback when a bucket needs what only
// budgetd_fillup does.
func decideSet(sb *setBatch, now time.Time) (p *setPlan, fallback bool) {
	if !sb.terms(now) {
		return nil, true
	}
	p = &setPlan{}
	// The first call of the batch with each Idempotency-Key, and its answer.
	var first map[[2]string]int
	for a, sc := range sb.calls {
		b, c := sc.b, sc.c
		l := b.eff
		p.replayOf = append(p.replayOf, -1)
		if c.idem.Key != "" {
			k := [2]string{c.idem.Scope, c.idem.Key}
			if f, ok := first[k]; ok {
				// A later call of the batch with the key: as the first
				// one's answer, replayed, or refused.
				p.entryOf = append(p.entryOf, -1)
				if sb.calls[f].c.idem.Hash == c.idem.Hash {
					p.replayOf[a] = f
					p.answers = append(p.answers, setAnswer{})
				} else {
					p.answers = append(p.answers, setAnswer{code: codeKeyReused})
				}
				continue
			}
			if first == nil {
				first = map[[2]string]int{}
			}
			first[k] = a
			p.recOf = append(p.recOf, a)
		}
		cost, ok := bucket.ParseAmount(c.cost)
		if !ok {
			return nil, true
		}
		d, ns := bucket.Fillup(l.Rule(), b.state, now, cost)
		charged := d.Accepted && cost.Sign() > 0
		if charged {
			if b.watch != nil && !b.cross(now, ns) {
				return nil, true // a threshold event is due: budgetd_fillup emits it
			}
			b.state, b.wrote = ns, true
		} else if !d.Accepted && !b.found && !b.wrote {
			return nil, true // a denial on no row: judged under a placeholder's lock
		}
		entry := -1
		if l.History && (charged || !d.Accepted && l.RecordDenials) {
			entry = p.hist.add(b, c, l, d.Accepted, now)
		}
		p.entryOf = append(p.entryOf, entry)
		p.answers = append(p.answers, setAnswer{out: ledger.FillupOutcome{Accepted: d.Accepted, Items: []ledger.ItemOutcome{{
			Snapshot: ledger.Snapshot{Limit: l, State: cloneState(b.state), Now: now},
		}}}})
	}
	for _, b := range sb.bs {
		switch {
		case !b.wrote:
		case b.found:
			p.up.add(b)
		default:
			p.in.add(b)
		}
	}
	return p, false
}

// terms sets each bucket's terms at now (eff, watch), from the index's
// overrides (checked against the limit's override version under the locks:
// setRead); false when a bucket needs what only budgetd_fillup does.
func (sb *setBatch) terms(now time.Time) bool {
	for _, b := range sb.bs {
		if b.state.Updated.After(now) {
			return false // a clock stepped back: budgetd_fillup moves the row
		}
		t := ledger.TermsAt(&ledger.TermsInput{Limit: b.lt.lim, Key: b.key, Overrides: b.lt.resolver(), State: b.state,
			Grants: b.grants, Now: now})
		if t.Settled {
			return false // an override ended since the last write: budgetd_fillup settles the bucket
		}
		b.eff, b.watch = t.Limit, t.Watch()
		if b.slots && b.eff.Window == nil {
			return false // a window's slots left on a row: budgetd_fillup settles them
		}
	}
	return true
}

// add appends the history entry of call c on bucket b under terms l, a
// fillup or (not accepted) a denial, with b's state after it, and returns
// its index. A charge that a limit in shadow mode that records denials let
// past the capacity is marked shadow_denied.
func (h *setHistory) add(b *setBucket, c *fillCall, l ledger.Limit, accepted bool, now time.Time) int {
	event := ledger.EventFillup
	var shadow *bool
	if !accepted {
		event = ledger.EventDenied
	} else if l.RecordDenials && l.Mode == ledger.ModeShadow &&
		b.state.Level.Add(bucket.HeldAt(b.state, now)).Cmp(ledger.Amount(l.Capacity)) > 0 {
		t := true
		shadow = &t
	}
	h.ids, h.keys, h.events = append(h.ids, b.lt.id), append(h.keys, b.key), append(h.events, string(event))
	h.costs, h.metas, h.shadow = append(h.costs, c.cost), append(h.metas, c.meta), append(h.shadow, shadow)
	return len(h.costs) - 1
}

// cross runs the threshold rule (ledger.Watch.Cross, as the memory and
// MySQL stores run it) for a charge that takes b from its state to next at
// now, and keeps the marks the write sets; false when the charge crosses or
// leaves a threshold. Each charge only adds to the use (level + held), so
// when none of a batch's charges emits an event the marks end as
// budgetd_batch_marks sets them.
func (b *setBucket) cross(now time.Time, next bucket.State) bool {
	rule := b.eff.Rule()
	pre := bucket.CanAccept(rule, b.state, now, bucket.Amount{})
	post := bucket.CanAccept(rule, next, now, bucket.Amount{})
	marks, cs := b.watch.Cross(b.marks, pre.Level.Add(pre.Held), post.Level.Add(post.Held), post.PeriodStart)
	b.marks = marks
	return len(cs) == 0
}

// setWrite is round trip 2 of an attempt: the plan's bucket rows, history
// entries and idempotency records, then COMMIT. It returns the entries'
// ids in the order of p.hist.
func (s *Store) setWrite(ctx context.Context, conn *pgxpool.Conn, sb *setBatch, p *setPlan, nowUS int64) ([]int64, error) {
	wb := &pgx.Batch{}
	rowWrites := 0
	if len(p.up.ids) > 0 {
		wb.Queue(setUpdateSQL, p.up.args()...)
		rowWrites++
	}
	if len(p.in.ids) > 0 {
		wb.Queue(setInsertSQL, p.in.args()...)
		rowWrites++
	}
	h := &p.hist
	var rScopes, rKeys, rHashes []string
	var rLimits []int64
	var rDocs [][]byte
	var rEntries []int32
	for _, a := range p.recOf {
		sc := sb.calls[a]
		doc, err := idemDoc(&p.answers[a].out, nowUS)
		if err != nil {
			return nil, err
		}
		rScopes, rKeys, rHashes = append(rScopes, sc.c.idem.Scope), append(rKeys, sc.c.idem.Key), append(rHashes, sc.c.idem.Hash)
		rLimits, rDocs, rEntries = append(rLimits, sc.b.lt.id), append(rDocs, doc), append(rEntries, int32(p.entryOf[a]+1))
	}
	switch {
	case len(p.recOf) > 0:
		wb.Queue(setRecordSQL, nowUS, h.ids, h.keys, h.events, h.costs, h.metas, h.shadow, rScopes, rKeys, rHashes, rLimits, rDocs, rEntries)
	case len(h.costs) > 0:
		wb.Queue(setHistorySQL, nowUS, h.ids, h.keys, h.events, h.costs, h.metas, h.shadow)
	}
	wb.Queue("COMMIT")
	res := conn.SendBatch(ctx, wb)
	defer res.Close()
	for range rowWrites {
		if _, err := res.Exec(); err != nil {
			return nil, err
		}
	}
	var entryIDs []int64
	if len(p.recOf) > 0 {
		var written int64
		if err := res.QueryRow().Scan(&entryIDs, &written); err != nil {
			return nil, err
		}
	} else if len(h.costs) > 0 {
		rows, err := res.Query()
		if err != nil {
			return nil, err
		}
		if entryIDs, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return nil, err
		}
		// Ids grow with insertion: the i-th smallest is the i-th entry.
		slices.Sort(entryIDs)
	}
	if len(entryIDs) != len(h.costs) {
		return nil, fmt.Errorf("postgres fillup: %d history entries for %d: %w", len(entryIDs), len(h.costs), errBadAnswer)
	}
	if _, err := res.Exec(); err != nil { // COMMIT
		return nil, err
	}
	return entryIDs, res.Close()
}

// trimHistory trims, after the commit, the history of each bucket that got
// an entry whose id is a multiple of 256, as budgetd_fillup_batch does
// inside its transaction (ids sorted: the i-th is the entry of lims[i],
// keys[i]). It only bounds what is kept, as the pruner does, so a failure
// changes no answer.
func (s *Store) trimHistory(ctx context.Context, conn *pgxpool.Conn, ids, lims []int64, keys []string) {
	for i, id := range ids {
		if id%256 == 0 {
			if _, err := conn.Exec(ctx, setTrimSQL, lims[i], keys[i]); err != nil {
				s.cfg.log.Warn("postgres: trimming a bucket's history", "err", err)
				return
			}
		}
	}
}

// cloneState copies st's lists, so that an answer keeps the state it was
// given.
func cloneState(st bucket.State) bucket.State {
	st.Holds, st.Slots = slices.Clone(st.Holds), slices.Clone(st.Slots)
	return st
}

// idemDoc is the outcome document a call's Idempotency-Key keeps, as
// budgetd_idem_doc writes it (the entry id is set by setRecordSQL); it
// decodes (decodeFillup) to the call's answer.
func idemDoc(o *ledger.FillupOutcome, nowUS int64) ([]byte, error) {
	type holdJSON struct {
		Amount    string `json:"amount"`
		ExpiresUS int64  `json:"expires_us"`
	}
	type stateJSON struct {
		Level     string     `json:"level"`
		UpdatedUS *int64     `json:"updated_us"`
		Holds     []holdJSON `json:"holds"`
		SlotIdx   []int64    `json:"slot_idx,omitempty"`
		SlotSums  []string   `json:"slot_sums,omitempty"`
	}
	type itemJSON struct {
		Fits    bool      `json:"fits"`
		Limit   limitDoc  `json:"limit"`
		State   stateJSON `json:"state"`
		EntryID *string   `json:"entry_id"`
	}
	snap := o.Items[0].Snapshot
	l, st := snap.Limit, snap.State
	d := limitDoc{Name: l.Name, Capacity: l.Capacity, LeakAmount: l.LeakAmount, LeakPerUS: l.LeakPer.Microseconds(),
		History: l.History, RecordDenials: l.RecordDenials, CreatedUS: l.CreatedAt.UnixMicro(), UpdatedUS: l.UpdatedAt.UnixMicro(),
		Override: l.Override, Grants: l.Grants}
	if l.Period != nil {
		sd := l.Period.StartDay
		d.Period = &periodDoc{Every: l.Period.Every, TZ: l.Period.TZ, StartDay: &sd}
	}
	if l.Window != nil {
		d.Window = &windowDoc{LengthUS: l.Window.Length.Microseconds(), PrecisionUS: l.Window.Precision.Microseconds()}
	}
	if l.Mode != ledger.ModeEnforce && l.Mode != "" {
		d.Mode, d.Grace = l.Mode, l.Grace
	}
	if len(l.Thresholds) > 0 {
		d.Thresholds, _ = thresholdArgs(l.Thresholds)
	}
	sj := stateJSON{Level: st.Level.String(), Holds: make([]holdJSON, len(st.Holds))}
	if !st.Updated.IsZero() {
		us := st.Updated.UnixMicro()
		sj.UpdatedUS = &us
	}
	for i, h := range st.Holds {
		sj.Holds[i] = holdJSON{Amount: h.Amount.String(), ExpiresUS: h.ExpiresAt.UnixMicro()}
	}
	for _, sl := range st.Slots {
		sj.SlotIdx, sj.SlotSums = append(sj.SlotIdx, sl.Index), append(sj.SlotSums, sl.Sum.String())
	}
	return json.Marshal(struct {
		Accepted bool       `json:"accepted"`
		NowUS    int64      `json:"now_us"`
		Items    []itemJSON `json:"items"`
	}{o.Accepted, nowUS, []itemJSON{{Fits: o.Accepted, Limit: d, State: sj}}})
}
