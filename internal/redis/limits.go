package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// defDoc is a limit definition as the hash P:lim:{P}:d:<name> holds it.
type defDoc struct {
	Capacity, Amount, Per, History, Created, Updated, Gen, Version string
	RecordDenials                                                  string // "1" when the limit records denials
	Every, TZ, StartDay                                            string // a periodic limit's rule; "" for the other kinds
	WindowLength, WindowPrecision                                  string // a window limit's rule (µs); "" for the other kinds
	Mode, Grace                                                    string // "" in a definition put before modes: enforce, grace 0
	Thresholds                                                     string // as the limit lists them, comma-separated; "" for none
	Rollover                                                       string // a periodic limit's rollover max; "" for none
	Overrides                                                      string // the override counter ov; "" before any override
}

func (d defDoc) limit(name string) (cachedLimit, error) {
	c, err1 := decimal.NewFromString(d.Capacity)
	var a decimal.Decimal
	var per int64
	var err2, err3 error
	var period *ledger.Period
	var window *ledger.Window
	switch {
	case d.WindowLength != "":
		var wl, wp int64
		wl, err2 = strconv.ParseInt(d.WindowLength, 10, 64)
		wp, err3 = strconv.ParseInt(d.WindowPrecision, 10, 64)
		window = &ledger.Window{Length: time.Duration(wl) * time.Microsecond, Precision: time.Duration(wp) * time.Microsecond}
	case d.Every != "":
		period = &ledger.Period{Every: d.Every, TZ: d.TZ}
		if d.StartDay != "" {
			period.StartDay, err2 = strconv.Atoi(d.StartDay)
		}
	default:
		a, err2 = decimal.NewFromString(d.Amount)
		per, err3 = strconv.ParseInt(d.Per, 10, 64)
	}
	ct, err4 := strconv.ParseInt(d.Created, 10, 64)
	ut, err5 := strconv.ParseInt(d.Updated, 10, 64)
	g, err6 := strconv.ParseInt(d.Gen, 10, 64)
	mode, grace, err7 := parseMode(d.Mode, d.Grace)
	var ths []ledger.Threshold
	var err8, err9 error
	var rollover *ledger.Rollover
	if d.Rollover != "" {
		var m decimal.Decimal
		m, err9 = decimal.NewFromString(d.Rollover)
		rollover = &ledger.Rollover{Max: m}
	}
	if d.Thresholds != "" {
		for _, f := range strings.Split(d.Thresholds, ",") {
			t, err := ledger.ParseThreshold("thresholds", f)
			if err != nil {
				err8 = err
			}
			ths = append(ths, t)
		}
	}
	for _, err := range []error{err1, err2, err3, err4, err5, err6, err7, err8, err9} {
		if err != nil {
			return cachedLimit{}, fmt.Errorf("redis: limit %q is malformed: %w", name, err)
		}
	}
	l := ledger.Limit{
		Name: name, Capacity: c, LeakAmount: a, LeakPer: time.Duration(per) * time.Microsecond, Period: period,
		Window: window, History: d.History == "1", RecordDenials: d.RecordDenials == "1", Mode: mode, Grace: grace,
		Thresholds: ths, Rollover: rollover, CreatedAt: fromMicros(ct), UpdatedAt: fromMicros(ut),
	}
	return cachedLimit{l: l, gen: g, version: d.Version, ov: d.Overrides}, nil
}

// parseMode reads a stored mode and grace. A limit stored before limits had
// modes has neither ("") and reads as enforce with grace 0; a mode that is
// none of the three is an error, so the mode read is always one of them.
func parseMode(mode, grace string) (string, decimal.Decimal, error) {
	var g decimal.Decimal
	if grace != "" {
		var err error
		if g, err = decimal.NewFromString(grace); err != nil {
			return "", decimal.Decimal{}, fmt.Errorf("bad grace %q: %w", grace, err)
		}
	}
	switch mode {
	case "", ledger.ModeEnforce:
		return ledger.ModeEnforce, g, nil
	case ledger.ModeShadow, ledger.ModeSoft:
		return mode, g, nil
	}
	return "", decimal.Decimal{}, fmt.Errorf("unknown mode %q", mode)
}

// defFromPairs reads a definition from an HGETALL reply inside a function's
// answer (field, value, ...).
func defFromPairs(v any) defDoc {
	m := map[string]string{}
	if f, ok := v.([]any); ok {
		for i := 0; i+1 < len(f); i += 2 {
			k, _ := f[i].(string)
			m[k], _ = f[i+1].(string)
		}
	}
	return defFromMap(m)
}

func defFromMap(m map[string]string) defDoc {
	return defDoc{Capacity: m["c"], Amount: m["a"], Per: m["p"], History: m["hi"], Created: m["ct"], Updated: m["ut"], Gen: m["g"], Version: m["v"],
		Every: m["pe"], TZ: m["pz"], StartDay: m["pd"], WindowLength: m["wl"], WindowPrecision: m["wp"], RecordDenials: m["rd"],
		Mode: m["m"], Grace: m["gr"], Thresholds: m["th"], Rollover: m["ro"], Overrides: m["ov"]}
}

// thresholdList is a limit's thresholds as its definition keeps them.
func thresholdList(ts []ledger.Threshold) string {
	ss := make([]string, len(ts))
	for i, t := range ts {
		ss[i] = t.String()
	}
	return strings.Join(ss, ",")
}

func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// PutLimit creates the limit or updates it in place, keeping its buckets.
// A new rule (leak rate, period or window) applies from the PUT on: every
// bucket is first settled under the old one, as bucket.Switch says (one
// script call per non-empty bucket, see settleLimit).
func (s *Store) PutLimit(ctx context.Context, l ledger.Limit) (ledger.Limit, error) {
	_, err := retryStale(ctx, s, func(ctx context.Context) (struct{}, error) {
		prev, err := s.fetchLimit(ctx, l.Name)
		switch {
		case errors.Is(err, ledger.ErrLimitNotFound):
			return struct{}{}, nil
		case err != nil:
			return struct{}{}, err
		case !prev.l.SameRule(l):
			return struct{}{}, s.settleLimit(ctx, prev, l)
		}
		return struct{}{}, nil
	})
	if err != nil {
		return ledger.Limit{}, err
	}
	keys := []string{s.k.limitDef(l.Name), s.k.limitIdx(), s.k.limitGen(), s.k.limitGens()}
	args := []any{s.nowArg(), l.Name, l.Capacity.String(), l.LeakAmount.String(), l.LeakPer.Microseconds(), boolArg(l.History), "", "", "", "", "",
		boolArg(l.RecordDenials), cmp.Or(l.Mode, ledger.ModeEnforce), l.Grace.String(), thresholdList(l.Thresholds), ""}
	if l.Rollover != nil {
		args[15] = l.Rollover.Max.String()
	}
	if p := l.Period; p != nil {
		args[3], args[4], args[6], args[7] = "", "", p.Every, p.TZ
		if p.StartDay != 0 {
			args[8] = strconv.Itoa(p.StartDay)
		}
	}
	if w := l.Window; w != nil {
		args[3], args[4], args[9], args[10] = "", "", w.Length.Microseconds(), w.Precision.Microseconds()
	}
	res, err := s.batch.do(ctx, &fcall{fn: fn("limit_put"), keys: keys, args: args}).Slice()
	if err != nil {
		return ledger.Limit{}, s.fail(ctx, "put limit", err)
	}
	if len(res) != 2 {
		return ledger.Limit{}, fmt.Errorf("redis: put limit: unexpected reply %v", res)
	}
	cur, old := defFromPairs(res[0]), defFromPairs(res[1])
	cl, err := cur.limit(l.Name)
	if err != nil {
		return ledger.Limit{}, err
	}
	if err := s.loadOverrides(ctx, &cl); err != nil {
		return ledger.Limit{}, err
	}
	cl = s.remember(cl)
	if old.Gen != "" {
		if prev, err := old.limit(l.Name); err == nil && !prev.l.SameRule(cl.l) &&
			(prev.l.Kind() != "leak" || cl.l.Kind() != "leak" || slowerLeak(prev.l, cl.l)) {
			// Buckets carry TTLs computed with the old rule (a faster leak,
			// the end of a period, the end of a window): they could expire
			// while not yet empty under the new one. Drop those TTLs; the next write to
			// each bucket sets one from the new rule.
			if err := s.scanKeys(ctx, s.k.gen(cl.gen)+":b:*", func(ctx context.Context, c goredis.Cmdable, ks []string) error {
				p := c.Pipeline()
				for _, k := range ks {
					p.Persist(ctx, k)
				}
				_, err := p.Exec(ctx)
				return err
			}); err != nil {
				return ledger.Limit{}, s.fail(ctx, "put limit", err)
			}
		}
	}
	return cl.l, nil
}

// settleLimit settles every bucket of cl whose rule changes with the new
// limit l (under the override that applies to it, if any) to now under its
// rule as of cl and drops its window slots (bucket.Switch), so that its
// level as of now is kept as written now under the new rule. A bucket
// written between its settle and the new definition is settled again by that
// write at the old rate, so at most the time between the last settle and the
// definition's switch (the length of the scan) leaks at the new rate.
func (s *Store) settleLimit(ctx context.Context, cl cachedLimit, l ledger.Limit) error {
	base := s.k.gen(cl.gen) + ":b:"
	next := cl
	next.l = l
	now := s.storeNow()
	var callErr error
	err := s.scanKeys(ctx, base+"*", func(ctx context.Context, _ goredis.Cmdable, ks []string) error {
		for _, bk := range ks {
			lim := cl
			if cl.ovs.len() > 0 {
				key, ok := decodeKey(strings.TrimPrefix(bk, base))
				if !ok {
					continue
				}
				if termsAt(cl, key, now).Limit.SameRule(termsAt(next, key, now).Limit) {
					continue
				}
				if err := s.switchBucket(ctx, bk, nil); err != nil {
					callErr = err
					return err
				}
				lim = s.forKey(cl, key)
			}
			t := target{lim: lim, bk: bk, hk: s.k.gen(cl.gen) + ":x:" + strings.TrimPrefix(bk, base), slot: slotOf(bk)}
			if _, err := s.call(ctx, "settle", false, nil, t, "", ledger.Idempotency{}); err != nil {
				callErr = err // already translated (errStale, ErrUnavailable)
				return err
			}
		}
		return nil
	})
	if callErr != nil {
		return callErr
	}
	if err != nil {
		return s.fail(ctx, "put limit", err)
	}
	return nil
}

// slowerLeak reports whether b leaks more slowly than a.
func slowerLeak(a, b ledger.Limit) bool {
	// b.amount / b.per < a.amount / a.per
	x := b.LeakAmount.Mul(decimal.NewFromInt(a.LeakPer.Microseconds()))
	y := a.LeakAmount.Mul(decimal.NewFromInt(b.LeakPer.Microseconds()))
	return x.LessThan(y)
}

// GetLimit reads the limit from Redis.
func (s *Store) GetLimit(ctx context.Context, name string) (ledger.Limit, error) {
	cl, err := s.fetchLimit(ctx, name)
	if err != nil {
		return ledger.Limit{}, err
	}
	return cl.l, nil
}

func (s *Store) fetchLimit(ctx context.Context, name string) (cachedLimit, error) {
	m, err := s.client.HGetAll(ctx, s.k.limitDef(name)).Result()
	if err != nil {
		return cachedLimit{}, s.fail(ctx, "get limit", err)
	}
	if len(m) == 0 {
		s.forget(name)
		return cachedLimit{}, fmt.Errorf("limit %q: %w", name, ledger.ErrLimitNotFound)
	}
	cl, err := defFromMap(m).limit(name)
	if err != nil {
		return cachedLimit{}, err
	}
	if err := s.loadOverrides(ctx, &cl); err != nil {
		return cachedLimit{}, err
	}
	return s.remember(cl), nil
}

// ListLimits returns up to n limits after after, by name: the names from
// the index, then their definitions in one pipeline (all limit keys share a
// slot). A limit deleted in between is left out.
func (s *Store) ListLimits(ctx context.Context, after string, n int) ([]ledger.Limit, error) {
	min := "-"
	if after != "" {
		min = "(" + after
	}
	names, err := s.client.ZRangeByLex(ctx, s.k.limitIdx(), &goredis.ZRangeBy{Min: min, Max: "+", Count: int64(n)}).Result()
	if err != nil {
		return nil, s.fail(ctx, "list limits", err)
	}
	p := s.client.Pipeline()
	defs := make([]*goredis.MapStringStringCmd, len(names))
	for i, name := range names {
		defs[i] = p.HGetAll(ctx, s.k.limitDef(name))
	}
	if len(names) > 0 {
		if _, err := p.Exec(ctx); err != nil {
			return nil, s.fail(ctx, "list limits", err)
		}
	}
	out := make([]ledger.Limit, 0, len(names))
	for i, name := range names {
		if len(defs[i].Val()) == 0 {
			continue
		}
		cl, err := defFromMap(defs[i].Val()).limit(name)
		if err != nil {
			return nil, err
		}
		out = append(out, cl.l)
	}
	return out, nil
}

// DeleteLimit removes the limit, then every key of its generation: buckets,
// holds, history and idempotency records, node by node.
func (s *Store) DeleteLimit(ctx context.Context, name string) error {
	g, err := s.batch.do(ctx, &fcall{fn: fn("limit_delete"), keys: []string{s.k.limitDef(name), s.k.limitIdx(), s.k.limitGens(),
		s.k.overrides(name), s.k.overridePatterns(name), s.k.overrideLog(name)},
		args: []any{name}}).Text()
	if err != nil {
		return s.fail(ctx, "delete limit", err)
	}
	s.forget(name)
	if g == "" {
		return fmt.Errorf("limit %q: %w", name, ledger.ErrLimitNotFound)
	}
	if gen, err := strconv.ParseInt(g, 10, 64); err == nil {
		s.mu.Lock()
		delete(s.ovSets, gen)
		s.mu.Unlock()
	}
	err = s.scanKeys(ctx, s.k.prefix+":"+g+":*", func(ctx context.Context, c goredis.Cmdable, ks []string) error {
		p := c.Pipeline()
		for _, k := range ks {
			p.Unlink(ctx, k)
		}
		_, err := p.Exec(ctx)
		return err
	})
	if err != nil {
		return s.fail(ctx, "delete limit", err)
	}
	return nil
}

// scanKeys calls fn with batches of the keys matching pattern, on every master.
func (s *Store) scanKeys(ctx context.Context, pattern string, fn func(ctx context.Context, c goredis.Cmdable, ks []string) error) error {
	return s.eachNode(ctx, func(ctx context.Context, c goredis.Cmdable) error {
		var cursor uint64
		for {
			ks, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			if len(ks) > 0 {
				if err := fn(ctx, c, ks); err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	})
}

// remember caches cl, with its script arguments formatted, and returns it.
func (s *Store) remember(cl cachedLimit) cachedLimit {
	cl.fetched = time.Now()
	cl.at = s.storeNow()
	cl.args = newLimitArgs(s.k, cl.l, cl.gen, cl.version, cl.at)
	cl.ovArgs = &ovArgs{}
	if cl.ovs != nil {
		cl.ovArgs.keys = &keyMemos{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits[cl.l.Name] = cl
	s.gens[cl.gen] = cl.l.Name
	return cl
}

// forgetAll empties the limit cache.
func (s *Store) forgetAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.limits)
	clear(s.gens)
}

func (s *Store) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cl, ok := s.limits[name]; ok {
		delete(s.gens, cl.gen)
		delete(s.limits, name)
	}
}

// limitFor returns the limit for a decision: from the cache while it is
// fresh, otherwise from Redis.
func (s *Store) limitFor(ctx context.Context, name string) (cachedLimit, error) {
	s.mu.Lock()
	cl, ok := s.limits[name]
	s.mu.Unlock()
	if ok && time.Since(cl.fetched) < s.cacheTTL {
		return cl, nil
	}
	return s.fetchLimit(ctx, name)
}

// limitByGen returns the limit of generation g, or ErrReservationNotFound
// when it no longer exists.
func (s *Store) limitByGen(ctx context.Context, g int64) (cachedLimit, error) {
	s.mu.Lock()
	name, ok := s.gens[g]
	s.mu.Unlock()
	if !ok {
		n, err := s.client.HGet(ctx, s.k.limitGens(), strconv.FormatInt(g, 10)).Result()
		if errors.Is(err, goredis.Nil) {
			return cachedLimit{}, ledger.ErrReservationNotFound
		}
		if err != nil {
			return cachedLimit{}, s.fail(ctx, "find limit", err)
		}
		name = n
	}
	cl, err := s.limitFor(ctx, name)
	if err == nil && cl.gen != g {
		cl, err = s.fetchLimit(ctx, name)
	}
	switch {
	case errors.Is(err, ledger.ErrLimitNotFound):
		return cachedLimit{}, ledger.ErrReservationNotFound
	case err != nil:
		return cachedLimit{}, err
	case cl.gen != g:
		return cachedLimit{}, ledger.ErrReservationNotFound
	}
	return cl, nil
}
