package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ovset"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/singleflight"
)

// A decision's terms (issue 42; docs/postgres.md "Terms") are resolved
// here, in Go, from each limit as stored and an in-process index of its
// overrides (ovset.Set), by the one rule of every store (ledger.TermsAt,
// ledger.SpanAt), and passed to budgetd_fillup as a budgetd_terms_arg per
// item (migration 0021). The function checks them under the bucket's lock
// against the limit's row (its id, updated_at and override_ver, which every
// PUT and DELETE of an override counts) and the database's now, and
// answers stale_terms when another instance, or this one, changed the
// limit or its overrides since, or the instant left their span: the limit
// is read again and the call retried. So the index needs no invalidation
// messages: the row it was read from is the version, checked where the
// decision is made.

// limitTerms is one limit as the index keeps it: the stored limit, its
// row's id and versions, and its overrides (nil: none).
type limitTerms struct {
	id   int64
	lim  ledger.Limit
	rev  int64 // updated_at, µs
	over int64 // override_ver, 0 for NULL
	set  *ovset.Set
}

// resolver is the limit's overrides as TermsAt takes them: nil (not a nil
// *ovset.Set) for none.
func (lt *limitTerms) resolver() ledger.Resolver {
	if lt.set == nil {
		return nil
	}
	return lt.set
}

// termsIndex is the store's index of limits and their overrides. A nil
// entry is a limit that did not exist when read.
type termsIndex struct {
	mu      sync.RWMutex
	m       map[string]*limitTerms
	load    singleflight.Group
	missing int          // nil entries of m
	skew    atomic.Int64 // the database's clock minus this process's, µs, as last seen
	loads   atomic.Uint64
}

// limitTerms returns the limit's terms, reading them when the index has
// none. One read per limit runs at a time, whoever waits for it; it has
// its own deadline (loadTimeout), so that a limit with many overrides is
// read once even when its first callers give up first.
func (s *Store) limitTerms(ctx context.Context, name string) (*limitTerms, error) {
	x := &s.terms
	x.mu.RLock()
	lt, ok := x.m[name]
	x.mu.RUnlock()
	if ok {
		return lt, nil
	}
	ch := x.load.DoChan(name, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.cfg.timeout, loadTimeout))
		defer cancel()
		lt, err := s.readLimitTerms(lctx, name)
		if err != nil {
			return nil, err
		}
		x.mu.Lock()
		if x.m == nil {
			x.m = map[string]*limitTerms{}
		}
		// A name without a limit is remembered too (the function answers
		// not found, or stale when it exists by then), but only so many:
		// calls naming random limits must not grow the index.
		if lt != nil || x.missing < maxMissing {
			if lt == nil {
				x.missing++
			}
			x.m[name] = lt
		}
		x.mu.Unlock()
		x.loads.Add(1)
		return lt, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*limitTerms), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("postgres terms of %q: %w", name, ctx.Err())
	}
}

// loadTimeout bounds the read of one limit and its overrides.
const loadTimeout = 30 * time.Second

// maxMissing is how many names without a limit the index remembers.
const maxMissing = 1024

// forget drops the limit from the index: its next decision reads it again.
func (x *termsIndex) forget(name string) {
	x.mu.Lock()
	if lt, ok := x.m[name]; ok {
		if lt == nil {
			x.missing--
		}
		delete(x.m, name)
	}
	x.mu.Unlock()
}

// forgetDeleted drops the limit from the index when the index has it but
// a decision found no such limit: it was deleted.
func (x *termsIndex) forgetDeleted(name string) {
	x.mu.RLock()
	lt := x.m[name]
	x.mu.RUnlock()
	if lt != nil {
		x.forget(name)
	}
}

// readLimitTerms reads one limit and all its overrides in one snapshot (a
// read-only REPEATABLE READ transaction): the version read is the one of
// the rows read.
func (s *Store) readLimitTerms(ctx context.Context, name string) (lt *limitTerms, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		l, overridden, err := readLimitRow(ctx, tx, name, "")
		if l == nil || err != nil {
			return err
		}
		if overridden {
			if l.set, err = readOverrides(ctx, tx, l.id); err != nil {
				return err
			}
		}
		lt = l
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres terms of %q: %w", name, err)
	}
	return lt, nil
}

// readLimitRow reads the limit name's row in tx, with lock its locking
// clause (e.g. "FOR UPDATE"), as the index keeps it but without its
// overrides, and whether it has any; nil for no such limit.
func readLimitRow(ctx context.Context, tx pgx.Tx, name, lock string) (*limitTerms, bool, error) {
	var raw []byte
	var lens []int32
	l := &limitTerms{}
	err := tx.QueryRow(ctx, `SELECT l.id, budgetd_limit_json(l), coalesce(l.override_ver, 0), l.override_lens
		  FROM limits l WHERE l.name = $1 `+lock, name).Scan(&l.id, &raw, &l.over, &lens)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var d limitDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, false, fmt.Errorf("decoding %s: %w", raw, errBadAnswer)
	}
	l.lim, l.rev = d.limit(), d.UpdatedUS
	return l, len(lens) > 0, nil
}

// readOverrides reads the overrides of the limit id, expired ones
// included (they tell the ends of temporary rule changes).
func readOverrides(ctx context.Context, tx pgx.Tx, id int64) (*ovset.Set, error) {
	rows, err := tx.Query(ctx, `SELECT pattern, capacity::text, leak_amount::text, leak_per_us, period_tz, period_start_day,
		       window_length_us, budgetd_us(expires_at), budgetd_us(created_at), budgetd_us(updated_at)
		  FROM overrides WHERE limit_id = $1`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	set := &ovset.Set{}
	var p numParser
	for rows.Next() {
		var c overrideCols
		var pattern string
		var expires *int64
		var created, updated int64
		if err := rows.Scan(&pattern, &c.capacity, &c.leakAmount, &c.leakPerUS, &c.tz, &c.startDay, &c.windowUS, &expires, &created, &updated); err != nil {
			return nil, err
		}
		c.pattern = &pattern
		o := c.override(&p)
		o.CreatedAt, o.UpdatedAt = fromUS(created), fromUS(updated)
		if expires != nil {
			o.ExpiresAt = fromUS(*expires)
		}
		set.Put(o)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return set, p.err
}

// termsNow is the instant a decision's terms are resolved at: the store's
// clock when one is set, else this process's clock moved by the skew to the
// database's last seen. The function checks the span against its own now,
// so a wrong guess costs a retry, never a wrong answer.
func (s *Store) termsNow() time.Time {
	if t, ok := s.nowArg().(time.Time); ok {
		return t
	}
	return time.Now().Add(time.Duration(s.terms.skew.Load()) * time.Microsecond)
}

// sawNow records the database's now, seen in an answer.
func (s *Store) sawNow(us int64) {
	if s.cfg.now == nil {
		s.terms.skew.Store(us - time.Now().UnixMicro())
	}
}

// termsArgs are the budgetd_terms_arg of each item (nil for a limit that
// did not exist when read).
func (s *Store) termsArgs(ctx context.Context, limits, keys []string) ([]*string, error) {
	now := s.termsNow()
	out := make([]*string, len(limits))
	for i, name := range limits {
		lt, err := s.limitTerms(ctx, name)
		if err != nil {
			return nil, err
		}
		if lt != nil {
			a := lt.arg(keys[i], now)
			out[i] = &a
		}
	}
	return out, nil
}

// arg is key's budgetd_terms_arg at now, as a record literal.
func (lt *limitTerms) arg(key string, now time.Time) string {
	var b strings.Builder
	b.Grow(64)
	b.WriteByte('(')
	b.WriteString(strconv.FormatInt(lt.id, 10))
	b.WriteByte(',')
	b.WriteString(strconv.FormatInt(lt.rev, 10))
	b.WriteByte(',')
	b.WriteString(strconv.FormatInt(lt.over, 10))
	if lt.set == nil && (lt.lim.Rollover == nil || lt.lim.Period == nil) {
		b.WriteString(",,,,,,,,,,,,")
		writeScale(&b, lt.lim)
		b.WriteByte(')')
		return b.String()
	}
	var sp ledger.Span
	eff := lt.lim
	var prev *ledger.Limit
	if lt.set != nil {
		sp = ledger.SpanAt(lt.set, lt.lim, key, now)
		eff = lt.set.Effective(lt.lim, key, now)
	}
	if eff.Rollover != nil && eff.Period != nil {
		start, end := eff.Rule().Period.Bounds(now)
		sp.From, sp.Until = latest(sp.From, start), earliestOf(sp.Until, end)
		if lt.set != nil {
			p := lt.set.Effective(lt.lim, key, start.Add(-time.Microsecond))
			prev = &p
		}
	}
	writeUS(&b, sp.From)
	writeUS(&b, sp.Until)
	writeUS(&b, sp.LastSwitch)
	lt.writeDeltas(&b, eff)
	b.WriteByte(',')
	if prev != nil {
		b.WriteString(prev.Capacity.String())
	}
	writeScale(&b, eff)
	b.WriteByte(')')
	return b.String()
}

// writeScale writes the field ceiling_scale (migration 0022): how l's mode
// scales the capacity into the ceiling (ledger.Limit.CeilingScale), NULL
// (empty) when the capacity does not bound it.
func writeScale(b *strings.Builder, l ledger.Limit) {
	b.WriteByte(',')
	if scale, bounded := l.CeilingScale(); bounded {
		b.WriteString(scale.String())
	}
}

// writeDeltas writes the override's terms of eff: what differs from the
// limit as stored, NULL (empty) for the rest.
func (lt *limitTerms) writeDeltas(b *strings.Builder, eff ledger.Limit) {
	l := &lt.lim
	b.WriteByte(',')
	if eff.Override != "" {
		writeQuoted(b, eff.Override)
	}
	b.WriteByte(',')
	if eff.Override != "" {
		b.WriteString(eff.Capacity.String())
	}
	b.WriteByte(',')
	leak := eff.Override != "" && eff.Kind() == "leak" && (!eff.LeakAmount.Equal(l.LeakAmount) || eff.LeakPer != l.LeakPer)
	if leak {
		b.WriteString(eff.LeakAmount.String())
	}
	b.WriteByte(',')
	if leak {
		b.WriteString(strconv.FormatInt(eff.LeakPer.Microseconds(), 10))
	}
	period := eff.Period != nil && l.Period != nil && *eff.Period != *l.Period
	b.WriteByte(',')
	if period {
		writeQuoted(b, eff.Period.TZ)
	}
	b.WriteByte(',')
	if period && eff.Period.StartDay != 0 {
		b.WriteString(strconv.Itoa(eff.Period.StartDay))
	}
	window := eff.Window != nil && l.Window != nil && *eff.Window != *l.Window
	b.WriteByte(',')
	if window {
		b.WriteString(strconv.FormatInt(eff.Window.Length.Microseconds(), 10))
	}
	b.WriteByte(',')
	if window {
		b.WriteString(strconv.FormatInt(eff.Window.Precision.Microseconds(), 10))
	}
}

// writeUS writes ",µs" of t, or "," for the zero time (NULL).
func writeUS(b *strings.Builder, t time.Time) {
	b.WriteByte(',')
	if !t.IsZero() {
		b.WriteString(strconv.FormatInt(t.UnixMicro(), 10))
	}
}

// writeQuoted writes s as a quoted field of a record literal.
func writeQuoted(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
}

// latest is the later of a and b, where a zero time is no bound.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// earliestOf is the earlier of a and b, where a zero time is no bound.
func earliestOf(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// staleTerms reports the limit whose terms a decision found stale
// (BD009, DETAIL "name now_us"), and the database's now.
func staleTerms(err error) (name string, nowUS int64, ok bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != codeStaleTerms {
		return "", 0, false
	}
	var d struct {
		Limit string `json:"limit"`
		NowUS int64  `json:"now_us"`
	}
	if json.Unmarshal([]byte(pgErr.Detail), &d) != nil {
		return "", 0, false
	}
	return d.Limit, d.NowUS, true
}

// settleAsked reports the bucket a decision found to be settled first
// (BD010, DETAIL {"limit", "key"}).
func settleAsked(err error) (limit, key string, ok bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != codeSettle {
		return "", "", false
	}
	var d struct {
		Limit string `json:"limit"`
		Key   string `json:"key"`
	}
	if json.Unmarshal([]byte(pgErr.Detail), &d) != nil {
		return "", "", false
	}
	return d.Limit, d.Key, true
}

// settleBucket settles the bucket at the ends of temporary rule changes it
// crossed since its last write (ledger.TermsAt, as SettleExpiries) and
// writes the settled state, under the row's lock, with the limit's row
// shared-locked so that no change of its overrides comes between the
// index's version and the write. A decision asked for it (BD010) and is
// retried after. When the index is stale, it is read again first.
func (s *Store) settleBucket(ctx context.Context, limit, key string) error {
	for range 3 {
		lt, err := s.limitTerms(ctx, limit)
		if err != nil || lt == nil {
			return err
		}
		stale := false
		err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			var rev, over, nowUS int64
			var level string
			var updated *int64
			var idx []int64
			var sums []string
			err := tx.QueryRow(ctx, `SELECT budgetd_us(l.updated_at), coalesce(l.override_ver, 0),
				       budgetd_us(coalesce($3::timestamptz, budgetd_clock())),
				       b.level::text, budgetd_us(b.updated_at), b.slot_idx, b.slot_sum::text[]
				  FROM limits l JOIN buckets b ON b.limit_id = l.id AND b.key = $2
				 WHERE l.id = $1 FOR SHARE OF l FOR UPDATE OF b`, lt.id, key, s.nowArg()).
				Scan(&rev, &over, &nowUS, &level, &updated, &idx, &sums)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // no bucket (or no limit) to settle: the retry decides
			}
			if err != nil {
				return err
			}
			if rev != lt.rev || over != lt.over {
				stale = true
				return nil
			}
			return lt.settle(ctx, tx, key, level, updated, idx, sums, fromUS(nowUS))
		})
		if err != nil {
			return fmt.Errorf("postgres settle %q %q: %w", limit, key, err)
		}
		if !stale {
			return nil
		}
		s.terms.forget(limit)
	}
	return nil
}

// settle writes the bucket's state settled at now, when the settling
// changed it.
func (lt *limitTerms) settle(ctx context.Context, tx pgx.Tx, key, level string, updated *int64, idx []int64, sums []string, now time.Time) error {
	if updated == nil {
		return nil
	}
	lv, ok := bucket.ParseAmount(level)
	slots, err := slotsOf(idx, sums)
	if !ok || err != nil {
		return fmt.Errorf("decoding the bucket %q %v: %w", level, sums, errBadAnswer)
	}
	t := ledger.TermsAt(&ledger.TermsInput{Limit: lt.lim, Key: key, Overrides: lt.resolver(),
		State: bucket.State{Level: lv, Updated: fromUS(*updated), Slots: slots}, Now: now})
	if !t.Settled {
		return nil
	}
	var sIdx []int64
	var sSums []string
	for _, sl := range t.State.Slots {
		sIdx, sSums = append(sIdx, sl.Index), append(sSums, sl.Sum.String())
	}
	_, err = tx.Exec(ctx, `UPDATE buckets SET level = $3::numeric, updated_at = budgetd_from_us($4), slot_idx = $5, slot_sum = $6::numeric[]
		 WHERE limit_id = $1 AND key = $2`, lt.id, key, t.State.Level.String(), t.State.Updated.UnixMicro(), sIdx, sSums)
	return err
}

// termsRetry handles a decision's answer that its terms were stale (the
// limit is read again) or that its bucket is to be settled first (it is):
// retry reports that the call is to be made again.
func (s *Store) termsRetry(ctx context.Context, err error) (retry bool, _ error) {
	if name, nowUS, ok := staleTerms(err); ok {
		s.sawNow(nowUS)
		s.terms.forget(name)
		s.stats.staleTerms.Add(1)
		return true, nil
	}
	if limit, key, ok := settleAsked(err); ok {
		s.stats.settled.Add(1)
		return true, s.settleBucket(ctx, limit, key)
	}
	return false, nil
}

// queryJSONTerms is queryJSON for a statement on one bucket that takes the
// bucket's terms: they are resolved again at every attempt, so that a retry
// after stale_terms or settle takes the limit as read since.
func (s *Store) queryJSONTerms(ctx context.Context, op string, out any, ref ledger.BucketRef, sql string, args func(terms *string) []any) error {
	var raw []byte
	err := s.do(ctx, op, func(ctx context.Context) error {
		terms, err := s.termsArgs(ctx, []string{ref.Limit}, []string{ref.Key})
		if err != nil {
			return err
		}
		return s.pool.QueryRow(ctx, sql, args(terms[0])...).Scan(&raw)
	})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("postgres %s: decoding %s: %w", op, raw, err)
	}
	return nil
}
