package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// view is what one attempt of a decision read: for each bucket of the call,
// in the caller's order, its limit and its row, with the database's clock
// for the attempt. The decision changes it with set and record; the write
// then stores what changed.
type view struct {
	now time.Time
	// limits are the limits of the buckets as the rule reads them, their
	// terms at now (termsAt); base are the limits as stored.
	limits  []limitRow
	base    []ledger.Limit
	buckets []bucketRow
	dirty   []bool
	entries [][]entryRow
	holds   []holdOp // hold rows to insert or change, with their buckets' writes
	// hold is the hold a Commit or Release asked for (withHold), read after
	// its bucket, nil when there is none.
	hold   *ledger.Reservation
	idems  []*idemRow // the idempotency records to write (one per decision of a group commit)
	events []eventRow
	// cached is a view of the decision cache (cache.go), not of a read: its
	// write also checks the rows it does not change, and, when guard, that
	// "now" is the database's clock or a little behind it.
	cached, guard bool
}

// eventRow is an event a decision emits, of bucket i of the view.
type eventRow struct {
	i  int
	ev ledger.OutboxEvent
}

// notice runs the threshold rule for a write that took bucket i from state
// before to its state now, keeping its marks and emitting the events
// (memory.Store.notice).
func (v *view) notice(i int, before bucket.State) {
	l, b := v.limits[i].limit, &v.buckets[i]
	if len(l.Thresholds) == 0 && b.marks == (ledger.Marks{}) {
		return
	}
	rule := l.Rule()
	pre := bucket.CanAccept(rule, before, v.now, bucket.Amount{})
	post := bucket.CanAccept(rule, b.state, v.now, bucket.Amount{})
	used := post.Level.Add(post.Held)
	marks, cs := l.WatchAt(l.Capacity).Cross(b.marks, pre.Level.Add(pre.Held), used, post.PeriodStart)
	if marks != b.marks {
		b.marks, v.dirty[i] = marks, true
	}
	for _, e := range ledger.NewEvents(l, ledger.BucketRef{Limit: l.Name, Key: b.key}, cs, v.now, used.Decimal(), l.Capacity, post.PeriodStart) {
		v.events = append(v.events, eventRow{i: i, ev: e})
	}
}

// readOpt asks a decision's read for more.
type readOpt struct {
	hold string
	idem ledger.Idempotency
}

// withIdem looks idem's record up first (a current read): an attempt that
// finds it ends with errReplayed, or ErrIdempotencyKeyReused, and changes
// nothing.
func withIdem(idem ledger.Idempotency) readOpt { return readOpt{idem: idem} }

// withHold reads the hold id with the buckets (v.hold), by a current read
// after them: a hold row changes only with its bucket's version, so a hold
// newer than the bucket read fails the write's compare-and-set.
func withHold(id string) readOpt { return readOpt{hold: id} }

// holdOp inserts a hold row (from == "") or changes one that is in state
// from.
type holdOp struct {
	from ledger.ReservationState
	res  ledger.Reservation
	lim  uint64
}

// entryRow is a history entry a decision adds.
type entryRow struct {
	seq    uint64
	at     time.Time
	event  ledger.Event
	amount decimal.Decimal
	hold   string
	grant  string
	meta   ledger.Meta
	shadow bool
}

// set stores st as bucket i's new state.
func (v *view) set(i int, st bucket.State) {
	v.buckets[i].state = st
	v.dirty[i] = true
}

// record adds a history entry to bucket i when its limit keeps history and
// returns its id ("" when none is written). The id is the bucket's next
// sequence number, which the write's compare-and-set makes the bucket's
// alone.
func (v *view) record(i int, ev ledger.Event, amount decimal.Decimal, meta ledger.Meta, shadow bool) string {
	return v.recordAt(i, v.now, ev, amount, "", meta, shadow)
}

// recordAt is record of an entry at a time of its own, about hold.
func (v *view) recordAt(i int, at time.Time, ev ledger.Event, amount decimal.Decimal, hold string, meta ledger.Meta, shadow bool) string {
	if !v.limits[i].limit.History {
		return ""
	}
	v.buckets[i].hseq++
	if len(meta) == 0 {
		meta = nil
	}
	v.entries[i] = append(v.entries[i], entryRow{seq: v.buckets[i].hseq, at: at, event: ev, amount: amount, hold: hold, meta: meta, shadow: shadow})
	v.dirty[i] = true
	return strconv.FormatUint(v.buckets[i].hseq, 10)
}

// expire records the holds of bucket i that a transition dropped as
// expired: their rows become expired at their expiry, with an expired entry
// each (memory.Store.apply). Every hold in a bucket's state is active.
func (v *view) expire(i int, expired []bucket.Hold) {
	for _, x := range expired {
		v.holds = append(v.holds, holdOp{from: ledger.Active, lim: v.limits[i].id, res: ledger.Reservation{ID: x.ID, State: ledger.Expired, ResolvedAt: x.ExpiresAt}})
		v.recordAt(i, x.ExpiresAt, ledger.EventExpired, x.Amount.Decimal(), x.ID, nil, false)
		v.dirty[i] = true
	}
}

// snapshot is bucket i as the decision leaves it.
func (v *view) snapshot(i int) ledger.Snapshot {
	return ledger.Snapshot{Limit: v.limits[i].limit, State: v.buckets[i].state, Now: v.now}
}

// decide runs fn on a fresh view of refs and writes what fn changed, as one
// atomic step. The first attempt reads without locks and writes with a
// compare-and-set of every version it read (two round trips: the read, and
// one multi-statement write); when the write finds something changed, or
// hits a deadlock or a lock-wait timeout, the next attempts lock the
// buckets' rows while they decide (SELECT … FOR UPDATE), so that a hot
// bucket is serialised rather than retried without end. After s.attempts
// attempts the call fails with ledger.ErrUnavailable. fn must be
// deterministic in the view: it runs again on every attempt.
func (s *Store) decide(ctx context.Context, refs []ledger.BucketRef, fn func(v *view) error, opts ...readOpt) error {
	if s.cache != nil && cacheable(opts) {
		unlock, err := s.cache.lock(ctx, refs)
		if err != nil {
			return classify(err)
		}
		defer unlock()
		if err := s.decideCached(ctx, refs, fn); !errors.Is(err, errMiss) {
			return err
		}
	}
	var err error
	for attempt := range s.attempts {
		err = s.attempt(ctx, refs, attempt > 0, fn, opts)
		if !errors.Is(err, errConflict) {
			return err
		}
	}
	return fmt.Errorf("%w: %d conflicting attempts: %w", ledger.ErrUnavailable, s.attempts, err)
}

// attempt is one try of decide.
func (s *Store) attempt(ctx context.Context, refs []ledger.BucketRef, locked bool, fn func(v *view) error, opts []readOpt) (err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return classify(err)
	}
	defer conn.Close()
	open := false // a transaction is open on conn
	defer func() {
		if open {
			rollback(ctx, conn)
		}
	}()
	if locked {
		if _, err := conn.ExecContext(ctx, s.beginSQL()); err != nil {
			return classify(err)
		}
		open = true
	}
	for _, o := range opts {
		if o.idem.Key != "" {
			if err := lookupIdem(ctx, conn, o.idem); err != nil {
				return err
			}
		}
	}
	v, err := s.read(ctx, conn, refs, locked)
	if err != nil {
		return err
	}
	for _, o := range opts {
		if o.hold == "" {
			continue
		}
		res, err := scanHold(conn.QueryRowContext(ctx, "SELECT "+holdCols+" FROM budgetd_holds h JOIN budgetd_limits l ON l.id = h.limit_id WHERE h.id = ? LOCK IN SHARE MODE", o.hold))
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return classify(err)
		default:
			v.hold = &res
		}
	}
	if err := fn(v); err != nil {
		return err
	}
	query, args, err := s.writeSQL(v, !locked, true)
	if err != nil {
		return err
	}
	if query == "" {
		if open {
			open = false
			if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
				return classify(err)
			}
		}
		return nil
	}
	open = true // from here an error may leave the write's transaction open
	if _, err := conn.ExecContext(ctx, query, args...); err != nil {
		return classify(err)
	}
	open = false
	s.cache.wrote(v)
	return nil
}

// beginSQL starts a transaction at the store's isolation level.
func (s *Store) beginSQL() string {
	level := "REPEATABLE READ"
	if s.isolation == ReadCommitted {
		level = "READ COMMITTED"
	}
	return "SET TRANSACTION ISOLATION LEVEL " + level + "; START TRANSACTION"
}

// rollback ends whatever transaction an error left open on conn; a
// connection that cannot roll back within the call's deadline (a hung
// server) is dropped from the pool, and the server rolls back when it sees
// the connection closed.
func rollback(ctx context.Context, conn *sql.Conn) {
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// bucketCols are the columns of a bucket row that bucketRow.scan reads.
const bucketCols = "b.bkey, b.version, b.level, b.updated_us, b.extra, b.hseq, b.last_us"

// read reads the limits and bucket rows of refs and the clock. Unlocked it
// is one statement; locked, the limits are read first and then the bucket
// rows are locked for update, in key order.
func (s *Store) read(ctx context.Context, conn *sql.Conn, refs []ledger.BucketRef, locked bool) (*view, error) {
	v := &view{limits: make([]limitRow, len(refs)), base: make([]ledger.Limit, len(refs)), buckets: make([]bucketRow, len(refs)), dirty: make([]bool, len(refs)), entries: make([][]entryRow, len(refs))}
	found := make([]bool, len(refs))
	q, args := readSQL(refs, locked)
	rows, err := conn.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var clock int64
	var specs []decodedSpec
	for rows.Next() {
		i, lr, b, at, err := readRow(rows, refs, &specs)
		if err != nil {
			return nil, err
		}
		v.limits[i], v.buckets[i], found[i], clock = lr, b, true, at
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	rows.Close()
	for i, ok := range found {
		if !ok {
			return nil, &limitMissing{name: refs[i].Limit}
		}
	}
	for i := range v.limits {
		// The overrides as of the rev read (the Store's copy; the rows
		// changed since it, when it is older): the write's check of the rev
		// holds the decision to them.
		if v.limits[i].set, err = s.overrides(ctx, conn, v.limits[i].id, v.limits[i].oseq, true); err != nil {
			return nil, err
		}
	}
	if locked {
		if clock, err = s.lockBuckets(ctx, conn, v); err != nil {
			return nil, err
		}
	}
	s.cache.sawClock(clock)
	s.cache.saw(v)
	s.at(v, clock)
	return v, nil
}

// readSQL is read's statement: for each ref i, in a UNION ALL, i, the
// clock, its limit's row and (unlocked) its bucket's row, NULLs when there
// is none yet (or, locked, always: lockBuckets reads them).
func readSQL(refs []ledger.BucketRef, locked bool) (string, []any) {
	var q strings.Builder
	var args []any
	for i, r := range refs {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		fmt.Fprintf(&q, "SELECT %d, %s, l.id, l.rev, l.oseq, l.spec, l.created_us, l.updated_us", i, clockSQL)
		if locked {
			q.WriteString(", NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM budgetd_limits l WHERE l.name = ?")
			args = append(args, []byte(r.Limit))
		} else {
			q.WriteString(", " + bucketCols + " FROM budgetd_limits l LEFT JOIN budgetd_buckets b ON b.limit_id = l.id AND b.bkey = ? WHERE l.name = ?")
			args = append(args, []byte(r.Key), []byte(r.Limit))
		}
	}
	return q.String(), args
}

// readRow scans one row of readSQL's: the index i of its ref, its limit,
// its bucket (not existing when the row has none) and the clock. specs are
// the specs decoded so far: a limit's row comes once per bucket of it (a
// group commit's batch reads many), and its spec is decoded once.
func readRow(rows *sql.Rows, refs []ledger.BucketRef, specs *[]decodedSpec) (i int, lr limitRow, b bucketRow, clock int64, err error) {
	var text string
	var created, updated int64
	var key []byte
	var version, hseq, last sql.NullInt64
	var level, extra sql.NullString
	var bupdated sql.NullInt64
	if err := rows.Scan(&i, &clock, &lr.id, &lr.rev, &lr.oseq, &text, &created, &updated, &key, &version, &level, &bupdated, &extra, &hseq, &last); err != nil {
		return 0, lr, b, 0, classify(err)
	}
	if j := slices.IndexFunc(*specs, func(d decodedSpec) bool {
		return d.name == refs[i].Limit && d.text == text && d.created == created && d.updated == updated
	}); j >= 0 {
		lr.limit = (*specs)[j].limit
	} else if lr.limit, err = decodeSpec(refs[i].Limit, text, created, updated); err != nil {
		return 0, lr, b, 0, err
	} else {
		*specs = append(*specs, decodedSpec{refs[i].Limit, text, created, updated, lr.limit})
	}
	b = bucketRow{key: refs[i].Key}
	if version.Valid {
		b.exists, b.version, b.hseq, b.last = true, uint64(version.Int64), uint64(hseq.Int64), last.Int64
		if err := b.decode(level.String, bupdated.Int64, extra); err != nil {
			return 0, lr, b, 0, err
		}
	}
	return i, lr, b, clock, nil
}

// limitMissing is ledger.ErrLimitNotFound for the limit name, which a read
// did not find: a batch answers its calls of that limit alone and decides
// the others (runGroup).
type limitMissing struct{ name string }

func (e *limitMissing) Error() string {
	return fmt.Sprintf("limit %q: %v", e.name, ledger.ErrLimitNotFound)
}
func (e *limitMissing) Unwrap() error { return ledger.ErrLimitNotFound }

// decodedSpec is a limit's row as read and the limit it decodes to.
type decodedSpec struct {
	name, text       string
	created, updated int64
	limit            ledger.Limit
}

// at sets v's "now" from the database's clock (in microseconds) and its
// limits' terms at now. The clock is read when the statement starts, a
// moment before its snapshot: a write that committed in between may carry a
// later time. "Now" is then that time, so a bucket's history never runs back
// in id order (unless the clock stepped back further than ledger.ClockStep).
func (s *Store) at(v *view, clock int64) (fake bool) {
	for _, b := range v.buckets {
		if b.last > clock && b.last-clock <= ledger.ClockStep.Microseconds() {
			clock = b.last
		}
	}
	v.now = time.UnixMicro(clock).UTC()
	if t := s.clock(); !t.IsZero() {
		v.now, fake = t.UTC().Truncate(time.Microsecond), true
	}
	for i := range v.limits {
		v.base[i] = v.limits[i].limit
		v.terms(i)
	}
	return fake
}

// terms sets bucket i's limit to its terms at v.now (termsAt), and keeps
// the rollover carry it receives with the bucket, for the bucket's write
// (memory.Store.apply): from the bucket's first write of a period on, its
// level in the period before is gone.
func (v *view) terms(i int) {
	v.limits[i].limit = termsAt(v.base[i], v.limits[i].set, &v.buckets[i], v.now)
	if c := v.limits[i].limit.Carry; c.Period != 0 {
		v.buckets[i].carry = c
	}
}

// termsAt returns base, a limit as stored, as it applies to bucket b at now:
// ledger.TermsAt of what the store read of it. b's state becomes the one
// settled through the ends of temporary rule changes since its last write
// (ledger.Terms.State), as a PUT of the limit at each end would have left
// it: nothing is written at an expiry, so every reading of the bucket
// settles it first, and the decision that next writes it stores the
// settled state. Its holds stay in it: the ones that ended by an expiry are
// ignored by every rule from then on and recorded as expired as any other
// (the next write's bucket.Expired, the pruner's pruneExpired), so a read
// still writes nothing.
func termsAt(base ledger.Limit, set *ledger.Overrides, b *bucketRow, now time.Time) ledger.Limit {
	in := ledger.TermsInput{Limit: base, Key: b.key, State: b.state, Carry: b.carry, Grants: b.grants, Now: now}
	if set.Len() > 0 {
		in.Overrides = set
	}
	t := ledger.TermsAt(&in)
	if t.Settled {
		holds := b.state.Holds
		b.state = t.State
		b.state.Holds = holds
	}
	return t.Limit
}

// lockBuckets reads v's bucket rows for update, in the order of their
// primary key, and returns the clock read with them.
func (s *Store) lockBuckets(ctx context.Context, conn *sql.Conn, v *view) (int64, error) {
	var q strings.Builder
	var args []any
	q.WriteString("SELECT " + clockSQL + ", b.limit_id, " + bucketCols + " FROM budgetd_buckets b WHERE ")
	for i := range v.buckets {
		if i > 0 {
			q.WriteString(" OR ")
		}
		q.WriteString("(b.limit_id = ? AND b.bkey = ?)")
		args = append(args, v.limits[i].id, []byte(v.buckets[i].key))
	}
	q.WriteString(" ORDER BY b.limit_id, b.bkey FOR UPDATE")
	var clock int64
	err := func() error {
		rows, err := conn.QueryContext(ctx, q.String(), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var b bucketRow
			var limitID uint64
			var key []byte
			var level string
			var updated int64
			var extra sql.NullString
			if err := rows.Scan(&clock, &limitID, &key, &b.version, &level, &updated, &extra, &b.hseq, &b.last); err != nil {
				return err
			}
			b.key, b.exists = string(key), true
			if err := b.decode(level, updated, extra); err != nil {
				return err
			}
			for i := range v.buckets {
				if v.limits[i].id == limitID && v.buckets[i].key == b.key {
					v.buckets[i] = b
					break
				}
			}
		}
		return rows.Err()
	}()
	if err != nil {
		return 0, classify(err)
	}
	if clock == 0 { // no row yet: read the clock in the same transaction
		err := conn.QueryRowContext(ctx, "SELECT "+clockSQL).Scan(&clock)
		if err != nil {
			return 0, classify(err)
		}
	}
	return clock, nil
}

// writeSQL returns the one multi-statement write of what v changed, "" when
// nothing did: (a transaction started, when begin,) a check of each limit
// the call read (its rev, under a shared lock, so a PUT or DELETE of the
// limit waits for the write or fails it), then for each changed bucket, in
// primary-key order, a compare-and-set of its version, then one insert of
// the new rows and one of the history entries, the holds, idempotency
// records and events, and the commit. Any check that fails ends the
// statement list with an error and the caller rolls back.
func (s *Store) writeSQL(v *view, begin, commit bool) (string, []any, error) {
	if !slices.Contains(v.dirty, true) && len(v.holds) == 0 && len(v.idems) == 0 && len(v.events) == 0 {
		return "", nil, nil
	}
	var w sqlList
	if begin {
		w.add(s.beginSQL())
	}
	if v.guard {
		// First, before any lock wait: the clock at the commit is later.
		w.add("SELECT budgetd_assert(? BETWEEN "+clockSQL+" - ? AND "+clockSQL+")", v.now.UnixMicro(), s.cache.skew.Microseconds())
	}
	writeLimitChecks(&w, v)
	if err := writeBuckets(&w, v); err != nil {
		return "", nil, err
	}
	writeHolds(&w, v)
	writeIdems(&w, v)
	if err := writeEvents(&w, v); err != nil {
		return "", nil, err
	}
	if commit {
		w.q.WriteString("COMMIT")
	}
	return w.q.String(), w.args, nil
}

// writeTx writes what v changed in tx, a transaction of the caller's.
func (s *Store) writeTx(ctx context.Context, tx *sql.Tx, v *view) error {
	q, args, err := s.writeSQL(v, false, false)
	if err != nil || q == "" {
		return err
	}
	_, err = tx.ExecContext(ctx, q, args...)
	return err
}

// sqlList is a multi-statement write being built: its text and arguments.
type sqlList struct {
	q    strings.Builder
	args []any
}

// add appends one statement and its arguments.
func (w *sqlList) add(stmt string, args ...any) {
	w.q.WriteString(stmt + ";\n")
	w.args = append(w.args, args...)
}

// values is one multi-row statement being built: its head, a row each,
// and its tail.
type values struct {
	head, row, tail string
	n               int
	args            []any
}

// add appends one row of args.
func (vs *values) add(args ...any) {
	vs.n++
	vs.args = append(vs.args, args...)
}

// to appends the INSERT to w, when it has rows.
func (vs *values) to(w *sqlList) {
	if vs.n == 0 {
		return
	}
	rows := strings.Repeat(vs.row+", ", vs.n)
	w.add(vs.head+rows[:len(rows)-2]+vs.tail, vs.args...)
}

// writeLimitChecks checks the rev of each limit the call read, under a
// shared lock, in one statement (its range scan takes the locks in id
// order).
func writeLimitChecks(w *sqlList, v *view) {
	var lims []limitRow
	for _, l := range v.limits {
		if !slices.ContainsFunc(lims, func(x limitRow) bool { return x.id == l.id }) {
			lims = append(lims, l)
		}
	}
	slices.SortFunc(lims, func(a, b limitRow) int { return cmpUint(a.id, b.id) })
	if len(lims) == 1 {
		w.add("SELECT budgetd_assert(COUNT(*) = 1) FROM budgetd_limits WHERE id = ? AND rev = ? LOCK IN SHARE MODE", lims[0].id, lims[0].rev)
		return
	}
	var q strings.Builder
	args := []any{len(lims)}
	q.WriteString("SELECT budgetd_assert(COUNT(*) = ?) FROM budgetd_limits FORCE INDEX (PRIMARY) WHERE (id, rev) IN (")
	for j, l := range lims {
		if j > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?)")
		args = append(args, l.id, l.rev)
	}
	q.WriteString(") LOCK IN SHARE MODE")
	w.add(q.String(), args...)
}

// writeBuckets writes v's buckets with set-based statements (issue 44): a
// batch of a group commit writes many, and a statement each cost the
// server and the driver more than the rows. First one locking read of
// every row the decision read as existing (those it changes and, on a
// cached view, those it only read), in primary-key order (its range
// scan's), that counts the rows still at the version and last_us the
// decision saw: any other count fails the write (budgetd_assert), so
// nothing of a decision on a changed row is kept. Then one INSERT … ON
// DUPLICATE KEY UPDATE of the changed existing rows, locked by then (a
// duplicate of the primary key takes a lock on the record only, no gap);
// one INSERT of the new rows, which fails on a duplicate key when a row
// appeared since (another writer, or a bucket a batch presumed new); and
// one INSERT of every history entry.
func writeBuckets(w *sqlList, v *view) error {
	var idx []int
	for i, d := range v.dirty {
		if d || v.cached {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		if c := cmpUint(v.limits[a].id, v.limits[b].id); c != 0 {
			return c
		}
		return strings.Compare(v.buckets[a].key, v.buckets[b].key)
	})
	check := values{row: "(?, ?, ?, ?)"}
	upd := values{head: "INSERT INTO budgetd_buckets (limit_id, bkey, version, level, updated_us, extra, th_marked, hseq, last_us) VALUES ", row: "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
		tail: " ON DUPLICATE KEY UPDATE version = VALUES(version), level = VALUES(level), updated_us = VALUES(updated_us), extra = VALUES(extra), th_marked = VALUES(th_marked), hseq = VALUES(hseq), last_us = VALUES(last_us)"}
	ins := values{head: "INSERT INTO budgetd_buckets (limit_id, bkey, version, level, updated_us, extra, th_marked, hseq, last_us) VALUES ", row: "(?, ?, 1, ?, ?, ?, ?, ?, ?)"}
	hist := values{head: "INSERT INTO budgetd_history (limit_id, bkey, seq, at_us, event, amount, reservation_id, grant_id, meta, shadow_denied) VALUES ", row: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"}
	now := v.now.UnixMicro()
	var prev []int64 // the last_us of each row of upd, as read
	for _, i := range idx {
		b := &v.buckets[i]
		key := []byte(b.key)
		if b.exists {
			// A row of a cached view that the decision does not change
			// (only a cached view gets here undirtied) must still be the
			// row the decision decided on, as must every row it changes.
			// last_us too: a row the pruner deleted and another instance
			// wrote again counts its versions from 1 once more.
			check.add(v.limits[i].id, key, b.version, b.last)
		}
		if !v.dirty[i] {
			continue
		}
		level, updated, extra, err := encodeState(b.state, b.marks, b.grants, b.carry)
		if err != nil {
			return err
		}
		if b.exists {
			upd.add(v.limits[i].id, key, b.version+1, level, updated, extra, markOf(b.marks).column(), b.hseq, max(b.last, now))
			prev = append(prev, b.last)
		} else {
			ins.add(v.limits[i].id, key, level, updated, extra, markOf(b.marks).column(), b.hseq, now)
		}
		for _, e := range v.entries[i] {
			meta, err := nullJSON(e.meta)
			if err != nil {
				return err
			}
			hist.add(v.limits[i].id, key, e.seq, e.at.UnixMicro(), string(e.event), e.amount.String(), nullString(e.hold), nullString(e.grant), meta, e.shadow)
		}
	}
	switch {
	case check.n > 0 && check.n == upd.n:
		// Every row checked is one written: the upsert checks them itself,
		// and the locking read is left out.
		guardUpsert(w, &upd, prev, now)
	case check.n > 0:
		check.head = "SELECT budgetd_assert(COUNT(*) = " + strconv.Itoa(check.n) + ") FROM budgetd_buckets FORCE INDEX (PRIMARY) WHERE (limit_id, bkey, version, last_us) IN ("
		check.tail = ") FOR UPDATE"
		check.to(w)
		upd.to(w)
	}
	ins.to(w)
	writeMarks(w, v)
	hist.to(w)
	return nil
}

// guardUpsert appends upd, the write-back of existing rows that are all
// the rows the decision read, as its own compare-and-set (docs/mysql.md,
// "The guarded upsert"): each row's duplicate-key update fails the
// statement (budgetd_assert) unless the row is at the version before the
// one written and at the last_us the decision saw, prev, which upd
// carries in place of the new last_us (the new one is GREATEST(last_us,
// now), as writeBuckets computes it). A row gone since (pruned) is
// inserted instead, and the count of affected rows (2 an updated row, 1
// an inserted one) then fails the write. The rows are in primary-key
// order, so the statement takes their locks in the order the locking read
// takes them. Without that read a row costs the server one index lookup,
// not two.
func guardUpsert(w *sqlList, upd *values, prev []int64, now int64) {
	upd.tail = " ON DUPLICATE KEY UPDATE version = IF(version = VALUES(version) - 1 AND last_us = VALUES(last_us), VALUES(version), budgetd_assert(FALSE)), " +
		"level = VALUES(level), updated_us = VALUES(updated_us), extra = VALUES(extra), th_marked = VALUES(th_marked), hseq = VALUES(hseq), last_us = GREATEST(last_us, " + strconv.FormatInt(now, 10) + ")"
	cols := len(upd.args) / upd.n
	for r, last := range prev {
		upd.args[(r+1)*cols-1] = last // last_us, the row's last column
	}
	upd.to(w)
	w.add("SELECT budgetd_assert(ROW_COUNT() = " + strconv.Itoa(2*upd.n) + ")")
}

// mark is a bucket's threshold mark as the database keeps it (migrations/
// mysql 0005 to 0007): when one of its marks is above (on), the signature
// of their list, in the column th_marked and as a row of budgetd_marked.
type mark struct {
	sig uint32
	on  bool
}

// markOf is the mark of a bucket with marks m.
func markOf(m ledger.Marks) mark {
	if m.Above == 0 {
		return mark{}
	}
	return mark{sig: m.Sig, on: true}
}

// column is m's th_marked: the signature, NULL when no mark is above.
// budgetd writes it beside extra: as a virtual column computed from
// extra's JSON it cost MariaDB two JSON_EXTRACTs of every written row of a
// limit with thresholds (docs/mysql.md, "Thresholds").
func (m mark) column() any {
	if !m.on {
		return nil
	}
	return uint64(m.sig)
}

// markRow is a row of budgetd_marked.
type markRow struct {
	limit uint64
	sig   uint32
	key   []byte
}

// writeMarks appends the writes of budgetd_marked (migrations/mysql 0007)
// that v's written buckets need: a row for each whose mark is on and was
// not (or was of another list), the row gone of each whose mark was on and
// is not (or is of another list). It runs after the buckets' own writes,
// which lock their rows, so the rows of one bucket are written by one
// transaction at a time, in the bucket's order. A row there already (left
// by a bucket an older budgetd pruned) is kept: a listing checks th_marked,
// which decides. Marks change when a bucket crosses a threshold or its
// period turns, so most batches write nothing here.
func writeMarks(w *sqlList, v *view) {
	var add, del []markRow
	for i, b := range v.buckets {
		if !v.dirty[i] {
			continue
		}
		now, was := markOf(b.marks), b.stored
		if !b.exists {
			was = mark{}
		}
		if now == was {
			continue
		}
		if now.on {
			add = append(add, markRow{v.limits[i].id, now.sig, []byte(b.key)})
		}
		if was.on {
			del = append(del, markRow{v.limits[i].id, was.sig, []byte(b.key)})
		}
	}
	byKey := func(a, b markRow) int {
		if c := cmpUint(a.limit, b.limit); c != 0 {
			return c
		}
		if c := cmpUint(uint64(a.sig), uint64(b.sig)); c != 0 {
			return c
		}
		return bytes.Compare(a.key, b.key)
	}
	slices.SortFunc(del, byKey)
	for _, r := range del {
		w.add("DELETE FROM budgetd_marked WHERE limit_id = ? AND sig = ? AND bkey = ?", r.limit, r.sig, r.key)
	}
	slices.SortFunc(add, byKey)
	ins := values{head: "INSERT INTO budgetd_marked (limit_id, sig, bkey) VALUES ", row: "(?, ?, ?)", tail: " ON DUPLICATE KEY UPDATE sig = sig"}
	for _, r := range add {
		ins.add(r.limit, r.sig, r.key)
	}
	ins.to(w)
}

// nullString is s, NULL when empty.
func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// nullJSON is m as JSON, NULL when nil.
func nullJSON(m ledger.Meta) (sql.NullString, error) {
	if m == nil {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return sql.NullString{}, err
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

// writeHolds inserts the holds v created and moves those it closed on from
// the state they were read in.
func writeHolds(w *sqlList, v *view) {
	for _, h := range v.holds {
		var committed sql.NullString
		if h.res.CommittedAmount.Valid {
			committed = sql.NullString{String: h.res.CommittedAmount.Decimal.String(), Valid: true}
		}
		var resolved int64
		if !h.res.ResolvedAt.IsZero() {
			resolved = h.res.ResolvedAt.UnixMicro()
		}
		if h.from == "" {
			w.add("INSERT INTO budgetd_holds (id, limit_id, bkey, amount, state, committed_amount, created_us, expires_us, resolved_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
				h.res.ID, h.lim, []byte(h.res.Bucket.Key), h.res.Amount.String(), string(h.res.State), committed, h.res.CreatedAt.UnixMicro(), h.res.ExpiresAt.UnixMicro(), resolved)
			continue
		}
		w.add("UPDATE budgetd_holds SET state = ?, committed_amount = ?, resolved_us = ? WHERE id = ? AND state = ?",
			string(h.res.State), committed, resolved, h.res.ID, string(h.from))
		w.add("SELECT budgetd_assert(ROW_COUNT() = 1)")
	}
}

// writeIdems inserts v's idempotency records in one statement, in id order
// so that two writes never wait for each other's.
func writeIdems(w *sqlList, v *view) {
	slices.SortFunc(v.idems, func(a, b *idemRow) int { return bytes.Compare(a.id, b.id) })
	ins := values{head: "INSERT INTO budgetd_idempotency (id, hash, limits, outcome, created_us) VALUES ", row: "(?, ?, ?, ?, ?)"}
	for _, r := range v.idems {
		ins.add(r.id, r.hash, r.limits, r.outcome, v.now.UnixMicro())
	}
	ins.to(w)
}

// writeEvents numbers v's events from the sequence row and inserts them,
// last: the sequence row is held from here to the commit only.
func writeEvents(w *sqlList, v *view) error {
	k := len(v.events)
	if k == 0 {
		return nil
	}
	w.add("UPDATE budgetd_event_seq SET n = LAST_INSERT_ID(n + ?) WHERE id = 1", k)
	ins := values{head: "INSERT INTO budgetd_events (seq, limit_id, bkey, at_us, body) VALUES ", row: "(LAST_INSERT_ID() - ? + 1, ?, ?, ?, ?)"}
	for j, e := range v.events {
		body, err := json.Marshal(e.ev)
		if err != nil {
			return err
		}
		ins.add(k-j, v.limits[e.i].id, []byte(v.buckets[e.i].key), e.ev.Time.UnixMicro(), string(body))
	}
	ins.to(w)
	return nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
