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
)

// The set-based batch (issue 44, step 2; WithSetBatch, off by default) decides a coalesced batch of the
// common kind in Go, with package bucket as the memory and MySQL stores do, and reads and writes the
// database set-wise instead of calling budgetd_fillup_batch once per bucket:
//
//   - round trip 1: BEGIN; lock the batch's existing bucket rows in one statement, in (limit_id, key) order
//     as every call locks them; then, in a statement of its own (so at READ COMMITTED it sees whatever
//     committed before the locks were granted), the database's now, each limit's version and grant rows,
//     and each bucket's active holds;
//   - the decision, per bucket in arrival order at that one instant, exactly as budgetd_fillup_batch makes
//     it (bucket.Fillup on the state the previous call left);
//   - round trip 2: the written buckets in one UPDATE and one INSERT, the history entries in one INSERT,
//     COMMIT.
//
// A batch goes this way only when everything about it is the common case, known in Go before it is sent:
// READ COMMITTED, more than one call, and limits in the terms index that are leaky or periodic, without
// overrides, thresholds or rollover. A call's Idempotency-Key is decided as budgetd_fillup_batch decides it:
// a later call of the batch with the key replays the first (same request) or is refused; the first writes
// the record, in the statement that writes the history, with its entry's id. What only the read can tell sends it the usual way
// after a ROLLBACK, nothing written: a limit changed or deleted since the index read it, grant rows, expired
// holds to record, a clock stepped back, a window's slots left on a row, a denial on a bucket without a
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
	found  bool // a row exists (a placeholder included)
	slots  bool // the row has a window's slots
	state  bucket.State
	wrote  bool
	entry0 int // the first of its history entries in the batch's list
}

// setEligible reports whether every call of batch may go set-wise, by what
// the terms index knows; it reads a limit the index does not have yet.
func (s *Store) setEligible(ctx context.Context, batch []*fillCall) bool {
	if !s.cfg.setBatch || len(batch) < 2 || s.cfg.isolation != string(ReadCommitted) {
		return false
	}
	for _, c := range batch {
		lt, err := s.limitTerms(ctx, c.ref.Limit)
		if err != nil || lt == nil || lt.set != nil || lt.lim.Window != nil || len(lt.lim.Thresholds) > 0 || lt.lim.Rollover != nil {
			return false
		}
	}
	return true
}

const setLockSQL = `SELECT b.limit_id, b.key, b.level::text, budgetd_us(b.updated_at), b.slot_idx IS NOT NULL
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
       coalesce(l.grant_rows, 0), coalesce(h.amounts, '{}'), coalesce(h.expires, '{}'), coalesce(h.expired, 0)
  FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS u(l, k, i)
 CROSS JOIN t CROSS JOIN r
  LEFT JOIN limits l ON l.id = u.l
  LEFT JOIN LATERAL (
        SELECT array_agg(h.amount::text ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > t.now) AS amounts,
               array_agg(budgetd_us(h.expires_at) ORDER BY h.expires_at, h.id) FILTER (WHERE h.expires_at > t.now) AS expires,
               count(*) FILTER (WHERE h.expires_at <= t.now) AS expired
          FROM holds h WHERE h.limit_id = u.l AND h.key = u.k AND h.state = 'active') h ON true
 ORDER BY u.i`

const setUpdateSQL = `UPDATE buckets b SET level = u.v::numeric, updated_at = budgetd_from_us(u.t)
  FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS u(l, k, v, t)
 WHERE b.limit_id = u.l AND b.key = u.k`

const setInsertSQL = `INSERT INTO buckets (limit_id, key, level, updated_at, th_sig, th_above, th_period)
SELECT u.l, u.k, u.v::numeric, budgetd_from_us(u.t), 0, 0, 0
  FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS u(l, k, v, t)`

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

// runSet decides live set-wise and answers each call; errSetFallback when
// the read found what only budgetd_fillup decides (nothing was written).
func (s *Store) runSet(ctx context.Context, deadline time.Time, live []*fillCall) error {
	// The buckets in lock order, each with its calls in arrival order.
	var bs []*setBucket
	at := map[ledger.BucketRef]*setBucket{}
	for _, c := range live {
		b := at[c.ref]
		if b == nil {
			lt, err := s.limitTerms(ctx, c.ref.Limit)
			if err != nil || lt == nil {
				return errSetFallback
			}
			b = &setBucket{lt: lt, key: c.ref.Key}
			at[c.ref] = b
			bs = append(bs, b)
		}
		b.calls = append(b.calls, c)
	}
	slices.SortFunc(bs, func(a, b *setBucket) int {
		return cmp.Or(cmp.Compare(a.lt.id, b.lt.id), cmp.Compare(a.key, b.key))
	})
	if deadline.IsZero() {
		deadline = time.Now().Add(s.cfg.timeout)
	}
	var answers []setAnswer
	fallback := false
	err := s.doUntil(ctx, deadline, "fillup", func(ctx context.Context) error {
		var err error
		for range 3 {
			answers, err = s.setAttempt(ctx, bs)
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
	i := 0
	for _, b := range bs {
		for _, c := range b.calls {
			c.out, c.err = answers[i].out, nil
			if answers[i].code != "" {
				c.err = s.fail(ctx, "fillup", &pgconn.PgError{Severity: "ERROR", Code: answers[i].code,
					Message: fmt.Sprintf("idempotency key \"%s\" was used with a different request", c.idem.Key)})
			}
			i++
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

// setAttempt is one transaction of runSet. Its answers are in the order of
// bs and their calls.
func (s *Store) setAttempt(ctx context.Context, bs []*setBucket) (answers []setAnswer, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	ids := make([]int64, len(bs))
	keys := make([]string, len(bs))
	for i, b := range bs {
		ids[i], keys[i] = b.lt.id, b.key
		b.found, b.slots, b.state, b.wrote = false, false, bucket.State{}, false
	}
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

	// Round trip 1: lock, then read under the locks.
	rb := &pgx.Batch{}
	rb.Queue("BEGIN")
	rb.Queue(setLockSQL, ids, keys)
	var idemScopes, idemKeys []string
	for _, b := range bs {
		for _, c := range b.calls {
			if c.idem.Key != "" {
				idemScopes, idemKeys = append(idemScopes, c.idem.Scope), append(idemKeys, c.idem.Key)
			}
		}
	}
	rb.Queue(setReadSQL, ids, keys, s.nowArg(), idemScopes, idemKeys)
	res := conn.SendBatch(ctx, rb)
	open = true
	if _, err := res.Exec(); err != nil {
		res.Close()
		return nil, err
	}
	byRef := map[ledger.BucketRef]*setBucket{}
	for _, b := range bs {
		byRef[ledger.BucketRef{Limit: b.lt.lim.Name, Key: b.key}] = b
	}
	idPos := map[int64]string{}
	for _, b := range bs {
		idPos[b.lt.id] = b.lt.lim.Name
	}
	rows, err := res.Query()
	if err != nil {
		res.Close()
		return nil, err
	}
	for rows.Next() {
		var id int64
		var key, level string
		var updated *int64
		var slots bool
		if err := rows.Scan(&id, &key, &level, &updated, &slots); err != nil {
			rows.Close()
			res.Close()
			return nil, err
		}
		b := byRef[ledger.BucketRef{Limit: idPos[id], Key: key}]
		if b == nil {
			continue
		}
		lv, ok := bucket.ParseAmount(level)
		if !ok {
			rows.Close()
			res.Close()
			return nil, fmt.Errorf("postgres fillup: decoding level %q: %w", level, errBadAnswer)
		}
		b.found, b.slots = true, slots
		b.state.Level = lv
		if updated != nil {
			b.state.Updated = fromUS(*updated)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		res.Close()
		return nil, err
	}
	var nowUS int64
	fallback := false
	rows, err = res.Query()
	if err != nil {
		res.Close()
		return nil, err
	}
	for rows.Next() {
		var i int32
		var live int64 // live idempotency records of the batch's keys
		var exists bool
		var rev, over, grants, expired int64
		var amounts []string
		var expires []int64
		if err := rows.Scan(&i, &nowUS, &live, &exists, &rev, &over, &grants, &amounts, &expires, &expired); err != nil {
			rows.Close()
			res.Close()
			return nil, err
		}
		b := bs[i-1]
		if live > 0 {
			fallback = true // budgetd_fillup replays them
		}
		if !exists || rev != b.lt.rev || over != b.lt.over || grants > 0 || expired > 0 || b.slots || len(amounts) != len(expires) {
			if !exists || rev != b.lt.rev || over != b.lt.over {
				s.terms.forget(b.lt.lim.Name)
			}
			fallback = true
			continue
		}
		for j, a := range amounts {
			amount, ok := bucket.ParseAmount(a)
			if !ok {
				fallback = true
				break
			}
			b.state.Holds = append(b.state.Holds, bucket.Hold{Amount: amount, ExpiresAt: fromUS(expires[j])})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		res.Close()
		return nil, err
	}
	if err := res.Close(); err != nil {
		return nil, err
	}
	s.sawNow(nowUS)
	now := fromUS(nowUS)

	// Decide, bucket by bucket, each bucket's calls in arrival order.
	var (
		upIDs, inIDs       []int64
		upKeys, inKeys     []string
		upLevels, inLevels []string
		upTimes, inTimes   []int64
		hIDs               []int64
		hKeys, hEvents     []string
		hCosts, hMetas     []string
		hShadow            []*bool
		entryOf            []int // per answer: its entry's position in the history lists, -1 for none
		// The idempotency records: per record its call's answer, and per
		// answer the earlier one it replays (-1 for none).
		recOf    []int
		replayOf []int
		firstOf  map[[2]string]*fillCall
		answerOf map[*fillCall]int
	)
	for _, b := range bs {
		if b.state.Updated.After(now) {
			fallback = true // a clock stepped back: budgetd_fillup moves the row
		}
		if fallback {
			break
		}
		l := b.lt.lim
		rule := l.Rule()
		for _, c := range b.calls {
			replayOf = append(replayOf, -1)
			if c.idem.Key != "" {
				k := [2]string{c.idem.Scope, c.idem.Key}
				if first, ok := firstOf[k]; ok {
					// A later call of the batch with the key: as the first
					// one's answer, replayed, or refused.
					entryOf = append(entryOf, -1)
					if first.idem.Hash == c.idem.Hash {
						replayOf[len(replayOf)-1] = answerOf[first]
						answers = append(answers, setAnswer{})
					} else {
						answers = append(answers, setAnswer{code: codeKeyReused})
					}
					continue
				}
				if firstOf == nil {
					firstOf, answerOf = map[[2]string]*fillCall{}, map[*fillCall]int{}
				}
				firstOf[k], answerOf[c] = c, len(answers)
				recOf = append(recOf, len(answers))
			}
			cost, ok := bucket.ParseAmount(c.cost)
			if !ok {
				return nil, errSetFallback
			}
			d, ns := bucket.Fillup(rule, b.state, now, cost)
			charged := d.Accepted && cost.Sign() > 0
			if charged {
				b.state, b.wrote = ns, true
			} else if !d.Accepted && !b.found && !b.wrote {
				fallback = true // a denial on no row: judged under a placeholder's lock
				break
			}
			entry := -1
			if l.History && (charged || !d.Accepted && l.RecordDenials) {
				event := ledger.EventFillup
				var shadow *bool
				if !d.Accepted {
					event = ledger.EventDenied
				} else if l.RecordDenials && l.Mode == ledger.ModeShadow &&
					b.state.Level.Add(bucket.HeldAt(b.state, now)).Cmp(ledger.Amount(l.Capacity)) > 0 {
					t := true
					shadow = &t
				}
				entry = len(hCosts)
				hIDs, hKeys, hEvents = append(hIDs, b.lt.id), append(hKeys, b.key), append(hEvents, string(event))
				hCosts, hMetas, hShadow = append(hCosts, c.cost), append(hMetas, c.meta), append(hShadow, shadow)
			}
			entryOf = append(entryOf, entry)
			answers = append(answers, setAnswer{out: ledger.FillupOutcome{Accepted: d.Accepted, Items: []ledger.ItemOutcome{{
				Snapshot: ledger.Snapshot{Limit: l, State: cloneState(b.state), Now: now},
			}}}})
		}
		if b.wrote {
			if b.found {
				upIDs, upKeys = append(upIDs, b.lt.id), append(upKeys, b.key)
				upLevels, upTimes = append(upLevels, b.state.Level.String()), append(upTimes, b.state.Updated.UnixMicro())
			} else {
				inIDs, inKeys = append(inIDs, b.lt.id), append(inKeys, b.key)
				inLevels, inTimes = append(inLevels, b.state.Level.String()), append(inTimes, b.state.Updated.UnixMicro())
			}
		}
	}
	if fallback {
		open = false
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			return nil, err
		}
		return nil, errSetFallback
	}

	// Round trip 2: write, record, commit.
	wb := &pgx.Batch{}
	if len(upIDs) > 0 {
		wb.Queue(setUpdateSQL, upIDs, upKeys, upLevels, upTimes)
	}
	if len(inIDs) > 0 {
		wb.Queue(setInsertSQL, inIDs, inKeys, inLevels, inTimes)
	}
	var rScopes, rKeys, rHashes []string
	var rLimits []int64
	var rDocs [][]byte
	var rEntries []int32
	for _, a := range recOf {
		c := callAt(bs, a)
		doc, err := idemDoc(&answers[a].out, nowUS)
		if err != nil {
			return nil, err
		}
		rScopes, rKeys, rHashes = append(rScopes, c.idem.Scope), append(rKeys, c.idem.Key), append(rHashes, c.idem.Hash)
		rLimits, rDocs, rEntries = append(rLimits, bucketAt(bs, a).lt.id), append(rDocs, doc), append(rEntries, int32(entryOf[a]+1))
	}
	switch {
	case len(recOf) > 0:
		wb.Queue(setRecordSQL, nowUS, hIDs, hKeys, hEvents, hCosts, hMetas, hShadow, rScopes, rKeys, rHashes, rLimits, rDocs, rEntries)
	case len(hCosts) > 0:
		wb.Queue(setHistorySQL, nowUS, hIDs, hKeys, hEvents, hCosts, hMetas, hShadow)
	}
	wb.Queue("COMMIT")
	res = conn.SendBatch(ctx, wb)
	if len(upIDs) > 0 {
		if _, err := res.Exec(); err != nil {
			res.Close()
			return nil, err
		}
	}
	if len(inIDs) > 0 {
		if _, err := res.Exec(); err != nil {
			res.Close()
			return nil, err
		}
	}
	var entryIDs []int64
	if len(recOf) > 0 {
		var written int64
		if err := res.QueryRow().Scan(&entryIDs, &written); err != nil {
			res.Close()
			return nil, err
		}
	} else if len(hCosts) > 0 {
		rows, err := res.Query()
		if err != nil {
			res.Close()
			return nil, err
		}
		entryIDs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			res.Close()
			return nil, err
		}
		// Ids grow with insertion: the i-th smallest is the i-th entry.
		slices.Sort(entryIDs)
	}
	if len(entryIDs) != len(hCosts) {
		res.Close()
		return nil, fmt.Errorf("postgres fillup: %d history entries for %d: %w", len(entryIDs), len(hCosts), errBadAnswer)
	}
	if _, err := res.Exec(); err != nil { // COMMIT
		res.Close()
		return nil, err
	}
	open = false
	if err := res.Close(); err != nil {
		return nil, err
	}
	for i, e := range entryOf {
		if e >= 0 {
			answers[i].out.Items[0].EntryID = strconv.FormatInt(entryIDs[e], 10)
		}
	}
	for i, j := range replayOf {
		if j >= 0 {
			answers[i].out = answers[j].out
			answers[i].out.Items = slices.Clone(answers[j].out.Items)
			answers[i].out.Replayed = true
		}
	}
	s.trimHistory(ctx, conn, entryIDs, hIDs, hKeys)
	return answers, nil
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

// callAt and bucketAt are the call of answer a of a set-based batch and its
// bucket (answers follow bs and their calls).
func callAt(bs []*setBucket, a int) *fillCall {
	b, i := bucketOf(bs, a)
	return b.calls[i]
}

func bucketAt(bs []*setBucket, a int) *setBucket {
	b, _ := bucketOf(bs, a)
	return b
}

func bucketOf(bs []*setBucket, a int) (*setBucket, int) {
	for _, b := range bs {
		if a < len(b.calls) {
			return b, a
		}
		a -= len(b.calls)
	}
	panic("postgres: answer out of range")
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
		History: l.History, RecordDenials: l.RecordDenials, CreatedUS: l.CreatedAt.UnixMicro(), UpdatedUS: l.UpdatedAt.UnixMicro()}
	if l.Period != nil {
		sd := l.Period.StartDay
		d.Period = &periodDoc{Every: l.Period.Every, TZ: l.Period.TZ, StartDay: &sd}
	}
	if l.Mode != ledger.ModeEnforce && l.Mode != "" {
		d.Mode, d.Grace = l.Mode, l.Grace
	}
	sj := stateJSON{Level: st.Level.String(), Holds: make([]holdJSON, len(st.Holds))}
	if !st.Updated.IsZero() {
		us := st.Updated.UnixMicro()
		sj.UpdatedUS = &us
	}
	for i, h := range st.Holds {
		sj.Holds[i] = holdJSON{Amount: h.Amount.String(), ExpiresUS: h.ExpiresAt.UnixMicro()}
	}
	return json.Marshal(struct {
		Accepted bool       `json:"accepted"`
		NowUS    int64      `json:"now_us"`
		Items    []itemJSON `json:"items"`
	}{o.Accepted, nowUS, []itemJSON{{Fits: o.Accepted, Limit: d, State: sj}}})
}
