package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	goredis "github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
)

// units is an amount as an integer number of 10^-12, the functions' unit:
// in fixed point for every amount that converts (all the API takes).
func units(d decimal.Decimal) string {
	if a, ok := bucket.FromDecimal(d); ok {
		return a.Units()
	}
	return d.Shift(bucket.LevelScale).BigInt().String()
}

// fromUnits is the inverse of units.
func fromUnits(s string) (decimal.Decimal, error) {
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("redis: bad amount %q: %w", s, err)
	}
	return d.Shift(-bucket.LevelScale), nil
}

// amountFromUnits reads an amount in the functions' unit as the bucket
// rule's exact amount.
func amountFromUnits(s string) (bucket.Amount, error) {
	a, ok := bucket.ParseUnits(s)
	if !ok {
		return bucket.Amount{}, fmt.Errorf("redis: bad amount %q", s)
	}
	return a, nil
}

// windowDoc is a window as a limit document keeps it: length and
// precision in µs.
type windowDoc struct {
	L int64 `json:"l"`
	P int64 `json:"p"`
}

// limitDoc is the limit as an idempotency record keeps it (opaque to Lua),
// so a replayed outcome shows the limit of the original call.
type limitDoc struct {
	N  string         `json:"n"`
	C  string         `json:"c"`
	A  string         `json:"a"`
	P  int64          `json:"p"`
	PD *ledger.Period `json:"pd,omitempty"` // a periodic limit's rule
	W  *windowDoc     `json:"w,omitempty"`  // a window limit's rule
	H  bool           `json:"h"`
	D  bool           `json:"d,omitempty"` // record_denials
	M  string         `json:"m,omitempty"` // the mode; "" for enforce (and in records kept before modes)
	G  string         `json:"g,omitempty"` // a soft limit's grace
	R  string         `json:"r,omitempty"` // a periodic limit's rollover max; "" for none
	O  string         `json:"o,omitempty"` // the pattern of the override that applied; "" for none
	CT int64          `json:"ct"`
	UT int64          `json:"ut"`
}

func encodeLimit(l ledger.Limit) string {
	micros := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMicro()
	}
	d := limitDoc{N: l.Name, C: l.Capacity.String(), A: l.LeakAmount.String(), P: l.LeakPer.Microseconds(),
		PD: l.Period, H: l.History, D: l.RecordDenials, CT: micros(l.CreatedAt), UT: micros(l.UpdatedAt)}
	if l.Mode != "" && l.Mode != ledger.ModeEnforce {
		d.M = l.Mode
	}
	if !l.Grace.IsZero() {
		d.G = l.Grace.String()
	}
	if l.Rollover != nil {
		d.R = l.Rollover.Max.String()
	}
	d.O = l.Override
	if w := l.Window; w != nil {
		d.W = &windowDoc{L: w.Length.Microseconds(), P: w.Precision.Microseconds()}
	}
	b, _ := json.Marshal(d)
	return string(b)
}

func decodeLimit(s string) (ledger.Limit, error) {
	var d limitDoc
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return ledger.Limit{}, fmt.Errorf("redis: bad limit document: %w", err)
	}
	c, err1 := decimal.NewFromString(d.C)
	a, err2 := decimal.NewFromString(d.A)
	mode, grace, err3 := parseMode(d.M, d.G)
	if err1 != nil || err2 != nil || err3 != nil {
		return ledger.Limit{}, fmt.Errorf("redis: bad limit document %q", s)
	}
	l := ledger.Limit{Name: d.N, Capacity: c, LeakAmount: a, LeakPer: time.Duration(d.P) * time.Microsecond,
		Period: d.PD, History: d.H, RecordDenials: d.D, Mode: mode, Grace: grace, Override: d.O, CreatedAt: fromMicros(d.CT), UpdatedAt: fromMicros(d.UT)}
	if d.R != "" {
		m, err := decimal.NewFromString(d.R)
		if err != nil {
			return ledger.Limit{}, fmt.Errorf("redis: bad limit document %q", s)
		}
		l.Rollover = &ledger.Rollover{Max: m}
	}
	if d.W != nil {
		l.Window = &ledger.Window{Length: time.Duration(d.W.L) * time.Microsecond, Precision: time.Duration(d.W.P) * time.Microsecond}
	}
	return l, nil
}

// target is one bucket of a call: its limit and its keys.
type target struct {
	ref  ledger.BucketRef
	lim  cachedLimit
	bk   string
	hk   string
	slot int
}

func (s *Store) target(ctx context.Context, ref ledger.BucketRef) (target, error) {
	cl, err := s.limitFor(ctx, ref.Limit)
	if err != nil {
		return target{}, err
	}
	bk := s.k.bucket(cl.gen, ref.Key)
	return target{ref: ref, lim: s.forKey(cl, ref.Key), bk: bk, hk: s.k.history(cl.gen, ref.Key), slot: slotOf(bk)}, nil
}

// limitArgs are the arguments that describe a bucket's limit to a function
// (bkt in budgetd.lua), formatted once when the limit is cached.
type limitArgs struct {
	ceiling    string // units: ledger.Limit.Ceiling, the bound the functions admit against (the capacity unless the mode bends it)
	ceilArg    string // ceiling, how grants raise it (grantScale) and the rollover (rolloverArg), as the functions take it
	leakAmount string // units, divided by gcd(amount, per); "P" for a periodic limit, "W" for a window
	leakPer    string // µs, divided by gcd(amount, per); the period table; the window's "length:precision" in µs
	history    string // historyFlag
	version    string // "generation:version"
	doc        string // encodeLimit
	defKey     string // the definition key, checked against version on a standalone server
	thresholds string // "" for none, else thresholdsArg (the outbox is another argument: list)
}

func newLimitArgs(k keys, l ledger.Limit, gen int64, version string, at time.Time) limitArgs {
	var a, p string
	switch {
	case l.Window != nil:
		a, p = "W", windowArg(*l.Window)
	case l.Period != nil:
		a, p = "P", periodTable(*l.Period, at)
	default:
		a, p = leakRatio(l)
	}
	ceiling := units(l.Ceiling())
	return limitArgs{ceiling: ceiling, ceilArg: ceiling + grantScale(l) + rolloverArg(l), leakAmount: a, leakPer: p, history: historyFlag(l),
		version: strconv.FormatInt(gen, 10) + ":" + version, doc: encodeLimit(l), defKey: k.limitDef(l.Name),
		thresholds: thresholdsArg(l)}
}

// grantScale is what follows the ceiling in the functions' argument (bkt
// in budgetd.lua): how a bucket's active grants g raise the ceiling, as
// ledger.Limit.Ceiling of the capacity raised by g: by g × the mode's scale
// (ledger.Limit.CeilingScale). A scale of 1 (enforce): nothing follows.
// Another (soft): "/" and the scale × 10^4 (an integer: grace has at most 2
// decimals). No bound from the capacity (shadow): the ceiling stays, "/0".
func grantScale(l ledger.Limit) string {
	scale, bounded := l.CeilingScale()
	switch {
	case !bounded:
		return "/0"
	case !scale.Equal(decimal.New(1, 0)):
		return "/" + scale.Shift(4).String()
	}
	return ""
}

// rolloverArg is what follows the ceiling and its grant scale in the
// functions' argument (bkt in budgetd.lua) for a periodic limit with
// rollover: "~", its max and ":" and its capacity, in units (the capacity
// in force at a period's end that ledger.CarryAt carries from); "" for
// none.
func rolloverArg(l ledger.Limit) string {
	if l.Rollover == nil || l.Period == nil {
		return ""
	}
	return "~" + units(l.Rollover.Max) + ":" + units(l.Capacity)
}

// thresholdsArg is a limit's thresholds as the functions read them
// (thresholds in budgetd.lua), "" for none: ledger.ThresholdSig, the
// capacity in units, the limit's name, then per threshold the level at
// which it is reached (units) and its label: "sig;cap;name;lvl=80%,...".
// The capacity is the limit's (percentages follow it: ledger.Threshold.Level).
func thresholdsArg(l ledger.Limit) string {
	if len(l.Thresholds) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(strconv.FormatUint(uint64(ledger.ThresholdSig(l.Thresholds)), 10))
	b.WriteString(";" + units(l.Capacity) + ";" + l.Name + ";")
	for i, t := range l.Thresholds {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(units(t.Level(l.Capacity)) + "=" + t.String())
	}
	return b.String()
}

// historyFlag is what the functions read of a limit's history (bkt in
// budgetd.lua): "0" none, "1" kept, "2" kept with denials recorded, and for
// a shadow limit that records denials "3:" and its capacity in units, so
// that its shadow-denied charges are flagged in the history.
func historyFlag(l ledger.Limit) string {
	switch {
	case !l.History:
		return "0"
	case l.RecordDenials && l.Mode == ledger.ModeShadow:
		return "3:" + units(l.Capacity)
	case l.RecordDenials:
		return "2"
	}
	return "1"
}

// windowArg is a window as the functions read it: "length:precision" in µs.
func windowArg(w ledger.Window) string {
	return strconv.FormatInt(w.Length.Microseconds(), 10) + ":" + strconv.FormatInt(w.Precision.Microseconds(), 10)
}

// list is the limit's arguments in the order the functions read them, for
// a bucket in slot. The limit document goes only into idempotency records,
// so a call without a key passes none. A limit with thresholds passes them
// (the same string for every bucket, so the functions parse it once:
// thresholds in budgetd.lua) and then, apart, the outbox stream of the
// slot, where the function appends the events, and how long (ms) the
// stream keeps an entry: "<stream>;<keep>".
func (a *limitArgs) list(k keys, slot int, keep string, idem ledger.Idempotency) []any {
	doc := ""
	if idem.Key != "" {
		doc = a.doc
	}
	ob := ""
	if a.thresholds != "" {
		ob = k.outbox(slot) + ";" + keep
	}
	return []any{a.ceilArg, a.leakAmount, a.leakPer, a.history, a.version, doc, a.thresholds, ob}
}

// leakRatio returns the leak amount (units) and period (µs) divided by their
// greatest common divisor. The leak floor(amount*dt/per) is the same with
// either pair, but the reduced one keeps amount*dt below 2^53 far more often,
// which is when the functions compute it in plain Lua numbers (arith.lua).
func leakRatio(l ledger.Limit) (amount, per string) {
	a := l.LeakAmount.Shift(bucket.LevelScale).BigInt()
	p := big.NewInt(l.LeakPer.Microseconds())
	if a.Sign() > 0 && p.Sign() > 0 {
		g := new(big.Int).GCD(nil, nil, a, p)
		a.Quo(a, g)
		p.Quo(p, g)
	}
	return a.String(), p.String()
}

// errStale: a function saw that the limit changed since it was cached.
var errStale = errors.New("limit definition changed")

// withFreshLimits runs op with one deadline (callTimeout) for all of it, and
// again with the limit cache emptied when a function reports that a limit
// changed under it.
func withFreshLimits[T any](ctx context.Context, s *Store, op func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.callTimeout, errCallTimeout)
	defer cancel()
	return retryStale(ctx, s, op)
}

// retryStale runs op, and again with the limit cache emptied when a function
// reports that a limit changed under it, or after settling a bucket that a
// function found last written before an override's expiry changed its
// rule (switchBucket).
func retryStale[T any](ctx context.Context, s *Store, op func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	for attempt, switches := 0, 0; ; {
		out, err := op(ctx)
		if sw := (*switchError)(nil); errors.As(err, &sw) {
			if switches++; switches > maxSwitches {
				return zero, fmt.Errorf("redis: %w: buckets kept needing a switch", ledger.ErrUnavailable)
			}
			if err = s.switchBucket(ctx, sw.bk, sw.fields); err == nil {
				continue
			}
		}
		var pt *periodTableError
		switch {
		case errors.As(err, &pt):
			// A periodic limit's table did not reach the store's clock:
			// tables are made around that clock from now on.
			s.periodSkew.Store(int64(pt.now.Sub(s.goNow())))
		case !errors.Is(err, errStale):
			return out, err
		}
		if attempt++; attempt == 3 {
			return zero, fmt.Errorf("redis: %w: limit definitions kept changing", ledger.ErrUnavailable)
		}
		s.forgetAll()
	}
}

// call runs one bucket function through the batcher. Its KEYS are pre, the
// bucket and history keys of t, the limit's definition (standalone only:
// the function checks its version) and the idempotency record ik (when
// idem has a key); its ARGV are now, the request hash, whether the
// definition is in KEYS, the limit (limitArgs.list) and then extra.
func (s *Store) call(ctx context.Context, op string, ro bool, pre []string, t target, ik string, idem ledger.Idempotency, extra ...any) (reply, error) {
	keys := append(pre, t.bk, t.hk)
	check := "0"
	if !s.cluster {
		keys = append(keys, t.lim.args.defKey)
		check = "1"
	}
	ih := ""
	if idem.Key != "" {
		keys = append(keys, ik)
		ih = reqHash(idem)
	}
	args := append([]any{s.nowArg(), ih, check}, t.lim.args.list(s.k, t.slot, s.keepArg, idem)...)
	r, err := s.fcall(ctx, op, ro, keys, append(args, extra...)...)
	if err == nil && r.emitted {
		s.hint(ctx, t.slot)
	}
	return r, err
}

// reqHash is the request hash a call with an Idempotency-Key passes the
// functions: idem.Hash, or "-" for an empty one (a request without a
// body), since the functions read an empty hash as a call without a key.
func reqHash(idem ledger.Idempotency) string {
	if idem.Hash == "" {
		return "-"
	}
	return idem.Hash
}

// fcall runs a library function and parses its reply.
func (s *Store) fcall(ctx context.Context, op string, ro bool, keys []string, args ...any) (reply, error) {
	res, err := s.batch.do(ctx, &fcall{fn: fn(op), ro: ro, keys: keys, args: args}).StringSlice()
	if err != nil {
		return reply{}, s.fail(ctx, op, err)
	}
	r, err := parseReply(res)
	if err != nil {
		return reply{}, fmt.Errorf("redis %s: %w", op, err)
	}
	if r.stepped && !r.replayed {
		s.clockSteps.Add(1)
		s.log.Warn("redis: the clock was stepped back: a bucket's stored time was more than a minute ahead of now and was taken as now",
			"op", op, "now", r.now, "redis_keys", len(keys)) // bucket keys are often user ids: never logged
	}
	return r, nil
}

// reply is the one answer shape of the bucket functions (reply in
// budgetd.lua): the store's time, what the operation decided (x), a hold
// record and the buckets.
type reply struct {
	replayed bool
	stepped  bool // a bucket's stored time was ahead of now by more than ledger.ClockStep
	emitted  bool // the call appended threshold events to an outbox stream
	now      time.Time
	x        string
	hold     holdJSON // ID == "" when the reply has none
	buckets  []snapJSON
}

// holdFields is the number of hold record fields in a reply (HOLD in
// budgetd.lua).
const holdFields = 9

// parseReply parses a function's answer: an error code, 'replay' and the
// JSON of a stored reply, or a reply.
func parseReply(res []string) (reply, error) {
	if len(res) == 0 {
		return reply{}, errors.New("empty reply")
	}
	if res[0] == codePeriodTable && len(res) == 2 {
		now, err := parseMicros(res[1])
		if err != nil {
			return reply{}, err
		}
		return reply{}, &periodTableError{now: now}
	}
	if res[0] == codeSwitch && len(res) == 5 {
		return reply{}, &switchError{bk: res[1], fields: []any{res[2], res[3], res[4]}}
	}
	if res[0] == codeGrantInvalid && len(res) == 3 {
		return reply{}, parseGrantRefusal(res[1], res[2])
	}
	if err, ok := codeErrors[res[0]]; ok {
		return reply{}, err
	}
	replayed := false
	if res[0] == "replay" && len(res) == 2 {
		body := res[1]
		if strings.HasPrefix(body, "{") {
			return legacyReply(body)
		}
		res = nil
		if err := json.Unmarshal([]byte(body), &res); err != nil {
			return reply{}, err
		}
		replayed = true
	}
	if len(res) < 3+holdFields || res[0] != "ok" || (len(res)-3-holdFields)%4 != 0 {
		return reply{}, fmt.Errorf("unexpected reply %q", res)
	}
	nowArg, stepped := strings.CutSuffix(res[1], "!")
	nowArg, emitted := strings.CutSuffix(nowArg, "*")
	now, err := parseMicros(nowArg)
	if err != nil {
		return reply{}, err
	}
	h := res[3 : 3+holdFields]
	r := reply{replayed: replayed, stepped: stepped, emitted: emitted, now: now, x: res[2],
		hold: holdJSON{ID: h[0], Lim: h[1], E: h[2], A: h[3], S: h[4], C: h[5], T0: h[6], TE: h[7], TR: h[8]}}
	for b := res[3+holdFields:]; len(b) > 0; b = b[4:] {
		r.buckets = append(r.buckets, snapJSON{L: b[0], U: b[1], H: b[2], Lim: b[3]})
	}
	return r, nil
}

// legacyReply reads an idempotency record kept by an earlier version, a JSON
// document per operation, so a retry across an upgrade still replays.
func legacyReply(body string) (reply, error) {
	var d struct {
		snapJSON
		Acc     *bool      `json:"acc"`
		Removed *string    `json:"removed"`
		Refusal string     `json:"refusal"`
		Items   []snapJSON `json:"items"`
		B       *snapJSON  `json:"b"`
		Res     holdJSON   `json:"res"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		return reply{}, err
	}
	now, err := parseMicros(d.Now)
	if err != nil {
		return reply{}, err
	}
	r := reply{replayed: true, now: now, x: d.Refusal, hold: d.Res, buckets: d.Items}
	switch {
	case d.Removed != nil:
		r.x = *d.Removed
	case d.Acc != nil:
		r.x = boolArg(*d.Acc)
	}
	switch {
	case d.B != nil:
		r.buckets = []snapJSON{*d.B}
	case d.Items == nil:
		r.buckets = []snapJSON{d.snapJSON}
	}
	return r, nil
}

// snapJSON is a bucket as a function reports it.
type snapJSON struct {
	L   string `json:"l"`
	U   string `json:"u"`
	H   string `json:"h"`
	Lim string `json:"lim"`
	Now string `json:"now"` // only in records of earlier versions
}

func parseMicros(s string) (time.Time, error) {
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: bad time %q: %w", s, err)
	}
	return fromMicros(us), nil
}

// snapshot converts a reply's bucket into a ledger.Snapshot, as the memory
// store would build it. known is the limit the call was made with: a fresh
// reply carries no limit and one that equals known is used as is; only a
// replayed outcome may carry another one to decode. A level followed by
// "g" and an amount is a bucket with active grants: their sum is added to
// the limit's capacity (ledger.Limit.WithGrants). Then "r", an amount in
// units, "@" and a time in µs is the carry of a written bucket of a limit
// with rollover (ledger.Carry): what it receives of it, at most the max,
// is added too (ledger.Limit.WithRollover).
func (j snapJSON) snapshot(now time.Time, known cachedLimit) (ledger.Snapshot, error) {
	l := known.l
	if j.Lim != "" && j.Lim != known.args.doc {
		var err error
		if l, err = decodeLimit(j.Lim); err != nil {
			return ledger.Snapshot{}, err
		}
	}
	rest, carried, rolled := strings.Cut(j.L, "r")
	if rolled {
		unused, period, _ := strings.Cut(carried, "@")
		u, err := amountFromUnits(unused)
		if err != nil {
			return ledger.Snapshot{}, err
		}
		p, err := strconv.ParseInt(period, 10, 64)
		if err != nil {
			return ledger.Snapshot{}, fmt.Errorf("redis: bad carry %q: %w", carried, err)
		}
		l = l.WithRollover(ledger.Carry{Unused: u, Period: p})
	}
	level, grants, granted := strings.Cut(rest, "g")
	if granted {
		g, err := fromUnits(grants)
		if err != nil {
			return ledger.Snapshot{}, err
		}
		l = l.WithGrants(g)
	}
	lvl, err := amountFromUnits(level)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	upd, err := parseMicros(j.U)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	st := bucket.State{Level: lvl, Updated: upd}
	holds, slots, _ := strings.Cut(j.H, ";")
	if slots != "" {
		if st.Slots, err = parseSlots(slots); err != nil {
			return ledger.Snapshot{}, err
		}
	}
	if holds != "" {
		for _, h := range strings.Split(holds, ",") {
			a, e, _ := strings.Cut(h, ":")
			amt, err := amountFromUnits(a)
			if err != nil {
				return ledger.Snapshot{}, err
			}
			exp, err := parseMicros(e)
			if err != nil {
				return ledger.Snapshot{}, err
			}
			st.Holds = append(st.Holds, bucket.Hold{Amount: amt, ExpiresAt: exp})
		}
	}
	return ledger.Snapshot{Limit: l, State: st, Now: now}, nil
}

// parseSlots reads a window bucket's slots as the functions keep them (the
// field w in budgetd.lua): "P@i:s,i:s,...", the precision in µs, then per
// slot, oldest first, its index and its sum in units.
func parseSlots(w string) ([]bucket.Slot, error) {
	_, list, ok := strings.Cut(w, "@")
	if !ok {
		return nil, fmt.Errorf("redis: bad window slots %q", w)
	}
	out := make([]bucket.Slot, 0, strings.Count(list, ",")+1)
	for _, f := range strings.Split(list, ",") {
		is, ss, ok := strings.Cut(f, ":")
		i, err := strconv.ParseInt(is, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("redis: bad window slots %q", w)
		}
		sum, err := amountFromUnits(ss)
		if err != nil {
			return nil, err
		}
		out = append(out, bucket.Slot{Index: i, Sum: sum})
	}
	return out, nil
}

// decision splits the x of a Fillup, Drain or Reserve into what the call
// decided and the history entries it wrote that it names, one id per bucket
// ("" for none); ids is nil when it named none (reply in budgetd.lua).
func (r reply) decision() (x string, ids []string) {
	x, list, named := strings.Cut(r.x, ":")
	if !named {
		return x, nil
	}
	return x, strings.Split(list, ",")
}

// entryID is the id of the entry bucket i of the reply named, "" for none.
func entryID(ids []string, i int) string {
	if i < len(ids) {
		return ids[i]
	}
	return ""
}

// snapshot is the reply's only bucket.
func (r reply) snapshot(known cachedLimit) (ledger.Snapshot, error) {
	if len(r.buckets) != 1 {
		return ledger.Snapshot{}, fmt.Errorf("redis: reply with %d buckets, want 1", len(r.buckets))
	}
	return r.buckets[0].snapshot(r.now, known)
}

// Inspect returns a bucket's state; the function only reads.
func (s *Store) Inspect(ctx context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	return withFreshLimits(ctx, s, func(ctx context.Context) (ledger.Snapshot, error) {
		t, err := s.target(ctx, ref)
		if err != nil {
			return ledger.Snapshot{}, err
		}
		r, err := s.call(ctx, "inspect", true, nil, t, "", ledger.Idempotency{})
		if err != nil {
			return ledger.Snapshot{}, err
		}
		return r.snapshot(t.lim)
	})
}

// Fillup charges every item or none in one function call. In Redis Cluster
// all items must share a hash slot (ledger.ErrCrossSlot otherwise).
func (s *Store) Fillup(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	return withFreshLimits(ctx, s, func(ctx context.Context) (ledger.FillupOutcome, error) {
		ts := make([]target, len(items))
		for i, it := range items {
			t, err := s.target(ctx, it.Bucket)
			if err != nil {
				return ledger.FillupOutcome{}, err
			}
			ts[i] = t
		}
		if s.slotCheck {
			for _, t := range ts[1:] {
				if t.slot != ts[0].slot {
					return ledger.FillupOutcome{}, fmt.Errorf("%v and %v: %w", ts[0].ref, t.ref, ledger.ErrCrossSlot)
				}
			}
		}
		keys := make([]string, 0, 3*len(ts)+1)
		check := "0"
		for _, t := range ts {
			keys = append(keys, t.bk, t.hk)
		}
		if !s.cluster {
			check = "1"
			for _, t := range ts {
				keys = append(keys, t.lim.args.defKey)
			}
		}
		ih := ""
		if idem.Key != "" {
			ik, err := s.fillupRecord(ctx, ts, idem)
			if err != nil {
				return ledger.FillupOutcome{}, err
			}
			if len(ts) > 1 {
				keys = append(keys, s.k.idemMultiLegacy(ts[0].ref.Key, idem.Scope, idem.Key))
			}
			keys, ih = append(keys, ik), reqHash(idem)
		}
		args := make([]any, 0, 4+10*len(ts))
		args = append(args, s.nowArg(), ih, check, len(ts))
		for i, t := range ts {
			args = append(append(args, t.lim.args.list(s.k, t.slot, s.keepArg, idem)...), units(items[i].Cost), items[i].Meta.JSON())
		}
		r, err := s.fcall(ctx, "fillup", false, keys, args...)
		if err != nil {
			return ledger.FillupOutcome{}, err
		}
		if r.emitted {
			slots := make([]int, len(ts))
			for i, t := range ts {
				slots[i] = t.slot
			}
			s.hint(ctx, slots...)
		}
		x, ids := r.decision()
		out := ledger.FillupOutcome{Accepted: x == "1", Replayed: r.replayed, Items: make([]ledger.ItemOutcome, len(r.buckets))}
		for i, b := range r.buckets {
			sn, err := b.snapshot(r.now, ts[min(i, len(ts)-1)].lim)
			if err != nil {
				return ledger.FillupOutcome{}, err
			}
			out.Items[i] = ledger.ItemOutcome{Snapshot: sn, EntryID: entryID(ids, i)}
		}
		return out, nil
	})
}

// fillupRecord returns the key of a Fillup's idempotency record. A call on
// one bucket keeps it with the bucket. A multi-bucket call's target is the
// call itself (its scope and key): on a standalone server its record key is
// named by those alone. In Redis Cluster that key may be in any slot, while
// one function call may only touch the slot of its buckets, so the call
// first claims the key in the key's own slot (SET NX of the request hash):
// the same key with another request hash is refused there, wherever its
// buckets are, before anything is charged; then the record proper lives in
// the buckets' slot and the function replays from it.
func (s *Store) fillupRecord(ctx context.Context, ts []target, idem ledger.Idempotency) (string, error) {
	if len(ts) == 1 {
		return s.k.idemBucket(ts[0].lim.gen, ts[0].ref.Key, idem.Scope, idem.Key), nil
	}
	if !s.cluster {
		return s.k.idemCall(idem.Scope, idem.Key), nil
	}
	prev, err := s.client.SetArgs(ctx, s.k.idemCall(idem.Scope, idem.Key), idem.Hash,
		goredis.SetArgs{Mode: "NX", Get: true, TTL: ledger.IdempotencyRetention}).Result()
	switch {
	case errors.Is(err, goredis.Nil):
	case err != nil:
		return "", s.fail(ctx, "fillup", err)
	case prev != idem.Hash:
		return "", ledger.ErrIdempotencyKeyReused
	}
	return s.k.idemCallIn(ts[0].slot, idem.Scope, idem.Key), nil
}

// Drain lowers a bucket's level, clamped at zero.
func (s *Store) Drain(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, idem ledger.Idempotency, meta ledger.Meta) (ledger.DrainOutcome, error) {
	return withFreshLimits(ctx, s, func(ctx context.Context) (ledger.DrainOutcome, error) {
		t, err := s.target(ctx, ref)
		if err != nil {
			return ledger.DrainOutcome{}, err
		}
		ik := s.k.idemBucket(t.lim.gen, ref.Key, idem.Scope, idem.Key)
		r, err := s.call(ctx, "drain", false, nil, t, ik, idem, units(amount), meta.JSON())
		if err != nil {
			return ledger.DrainOutcome{}, err
		}
		x, ids := r.decision()
		out := ledger.DrainOutcome{Replayed: r.replayed, EntryID: entryID(ids, 0)}
		if out.Removed, err = fromUnits(x); err != nil {
			return ledger.DrainOutcome{}, err
		}
		out.Snapshot, err = r.snapshot(t.lim)
		return out, err
	})
}

// holdJSON is a hold record as a reply carries it.
type holdJSON struct {
	ID  string `json:"id"`
	Lim string `json:"lim"`
	E   string `json:"e"`
	A   string `json:"a"`
	S   string `json:"s"`
	C   string `json:"c"`
	T0  string `json:"t0"`
	TE  string `json:"te"`
	TR  string `json:"tr"`
}

// reservation converts the record. An active hold past its expiry at now is
// expired since then: the functions leave the record as it was.
func (h holdJSON) reservation(now time.Time) (ledger.Reservation, error) {
	key, ok := decodeKey(h.E)
	if !ok {
		return ledger.Reservation{}, fmt.Errorf("redis: hold %s has a bad bucket key", h.ID)
	}
	r := ledger.Reservation{ID: h.ID, Bucket: ledger.BucketRef{Limit: h.Lim, Key: key}}
	var err error
	if r.Amount, err = fromUnits(h.A); err != nil {
		return r, err
	}
	if r.CreatedAt, err = parseMicros(h.T0); err != nil {
		return r, err
	}
	if r.ExpiresAt, err = parseMicros(h.TE); err != nil {
		return r, err
	}
	if h.TR != "" {
		if r.ResolvedAt, err = parseMicros(h.TR); err != nil {
			return r, err
		}
	}
	switch h.S {
	case "a":
		r.State = ledger.Active
		if !now.Before(r.ExpiresAt) {
			r.State, r.ResolvedAt = ledger.Expired, r.ExpiresAt
		}
	case "c":
		r.State = ledger.Committed
		c, err := fromUnits(h.C)
		if err != nil {
			return r, err
		}
		r.CommittedAmount = decimal.NewNullDecimal(c)
	case "r":
		r.State = ledger.Released
	case "e":
		r.State = ledger.Expired
	default:
		return r, fmt.Errorf("redis: hold %s has state %q", h.ID, h.S)
	}
	return r, nil
}

// Reserve adds a hold when it fits.
func (s *Store) Reserve(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, ttl time.Duration, idem ledger.Idempotency, meta ledger.Meta) (ledger.ReserveOutcome, error) {
	return withFreshLimits(ctx, s, func(ctx context.Context) (ledger.ReserveOutcome, error) {
		t, err := s.target(ctx, ref)
		if err != nil {
			return ledger.ReserveOutcome{}, err
		}
		var rnd [12]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return ledger.ReserveOutcome{}, err
		}
		id := holdID(t.lim.gen, t.slot, hex.EncodeToString(rnd[:]))
		ik := s.k.idemBucket(t.lim.gen, ref.Key, idem.Scope, idem.Key)
		r, err := s.call(ctx, "reserve", false, []string{s.k.holdBase(t.lim.gen, t.slot) + id}, t, ik, idem,
			units(amount), ttl.Microseconds(), id, ref.Limit, encodeKey(ref.Key), meta.JSON())
		if err != nil {
			return ledger.ReserveOutcome{}, err
		}
		x, ids := r.decision()
		out := ledger.ReserveOutcome{Accepted: x == "1", Replayed: r.replayed, EntryID: entryID(ids, 0)}
		if out.Snapshot, err = r.snapshot(t.lim); err != nil {
			return ledger.ReserveOutcome{}, err
		}
		if out.Accepted {
			if out.Reservation, err = r.hold.reservation(r.now); err != nil {
				return ledger.ReserveOutcome{}, err
			}
		}
		return out, nil
	})
}

// Commit ends a hold and charges amount (the held amount when null).
func (s *Store) Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	a := ""
	if amount.Valid {
		a = units(amount.Decimal)
	}
	return s.resolve(ctx, id, "c", a, overrun, idem, meta)
}

// Release ends a hold without charging.
func (s *Store) Release(ctx context.Context, id string, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	return s.resolve(ctx, id, "r", "", false, idem, meta)
}

// resolve is Commit (mode "c") or Release ("r"). The function needs the
// hold's bucket keys in KEYS, so the bucket is read from the hold record
// first (it never changes); the function checks it again.
func (s *Store) resolve(ctx context.Context, id, mode, amount string, overrun bool, idem ledger.Idempotency, meta ledger.Meta) (ledger.ResolveOutcome, error) {
	return withFreshLimits(ctx, s, func(ctx context.Context) (ledger.ResolveOutcome, error) {
		g, slot, ok := parseHoldID(id)
		if !ok {
			return ledger.ResolveOutcome{}, ledger.ErrReservationNotFound
		}
		cl, err := s.limitByGen(ctx, g)
		if err != nil {
			return ledger.ResolveOutcome{}, err
		}
		rk := s.k.holdBase(g, slot) + id
		ekey, err := s.client.HGet(ctx, rk, "e").Result()
		if errors.Is(err, goredis.Nil) {
			return ledger.ResolveOutcome{}, ledger.ErrReservationNotFound
		}
		if err != nil {
			return ledger.ResolveOutcome{}, s.fail(ctx, "resolve", err)
		}
		key, ok := decodeKey(ekey)
		if !ok {
			return ledger.ResolveOutcome{}, fmt.Errorf("redis: hold %s has a bad bucket key", id)
		}
		t := target{lim: s.forKey(cl, key), bk: s.k.bucket(g, key), hk: s.k.history(g, key), slot: slot}
		ik := s.k.idemHold(g, slot, id, idem.Scope, idem.Key)
		r, err := s.call(ctx, "resolve", false, []string{rk}, t, ik, idem, mode, amount, boolArg(overrun), ekey, meta.JSON())
		if err != nil {
			return ledger.ResolveOutcome{}, err
		}
		out := ledger.ResolveOutcome{Refusal: r.x, Replayed: r.replayed}
		if out.Snapshot, err = r.snapshot(t.lim); err != nil {
			return ledger.ResolveOutcome{}, err
		}
		out.Reservation, err = r.hold.reservation(r.now)
		return out, err
	})
}

// Reservation returns a hold as stored and the store's clock.
func (s *Store) Reservation(ctx context.Context, id string) (ledger.Reservation, time.Time, error) {
	type res struct {
		r   ledger.Reservation
		now time.Time
	}
	out, err := withFreshLimits(ctx, s, func(ctx context.Context) (res, error) {
		g, slot, ok := parseHoldID(id)
		if !ok {
			return res{}, ledger.ErrReservationNotFound
		}
		if _, err := s.limitByGen(ctx, g); err != nil {
			return res{}, err
		}
		r, err := s.fcall(ctx, "reservation", true, []string{s.k.holdBase(g, slot) + id}, s.nowArg())
		if err != nil {
			return res{}, err
		}
		h, err := r.hold.reservation(r.now)
		return res{h, r.now}, err
	})
	return out.r, out.now, err
}

// History lists a bucket's entries newest first, recording due expiries.
func (s *Store) History(ctx context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error) {
	ct, cid := "", "0"
	if cursor != "" {
		var ok bool
		ct, cid, ok = strings.Cut(cursor, ".")
		_, err1 := strconv.ParseInt(ct, 10, 64)
		_, err2 := strconv.ParseInt(cid, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, "", &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: "cursor", Reason: "malformed cursor"}
		}
	}
	n = max(n, 0)
	out, err := withFreshLimits(ctx, s, func(ctx context.Context) ([]ledger.Entry, error) {
		t, err := s.target(ctx, ref)
		if err != nil || !t.lim.l.History {
			return nil, err
		}
		r, err := s.call(ctx, "history", false, nil, t, "", ledger.Idempotency{}, ct, cid, n)
		if err != nil || r.x == "" {
			return nil, err
		}
		var out []ledger.Entry
		for _, line := range strings.Split(r.x, "\n") {
			e, err := parseEntry(line)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	})
	if err != nil {
		return nil, "", err
	}
	if len(out) > n && n > 0 {
		out = out[:n]
		last := out[n-1]
		return out, fmt.Sprintf("%d.%s", last.Time.UnixMicro(), last.ID), nil
	}
	return out, "", nil
}

// parseEntry reads one history line: time|id|event|amount|hold id, then
// |meta (JSON) when the entry has meta. An event ending in "!" is a
// shadow-denied fillup or reserved entry (record in budgetd.lua).
func parseEntry(line string) (ledger.Entry, error) {
	f := strings.SplitN(line, "|", 6)
	if len(f) < 5 {
		return ledger.Entry{}, fmt.Errorf("redis history: bad entry %q", line)
	}
	at, err := parseMicros(f[0])
	if err != nil {
		return ledger.Entry{}, err
	}
	id, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return ledger.Entry{}, fmt.Errorf("redis history: bad entry %q", line)
	}
	amt, err := fromUnits(f[3])
	if err != nil {
		return ledger.Entry{}, err
	}
	ev, shadow := strings.CutSuffix(f[2], "!")
	e := ledger.Entry{ID: strconv.FormatInt(id, 10), Time: at, Event: ledger.Event(ev), Amount: amt, ReservationID: f[4], ShadowDenied: shadow}
	if e.Event == ledger.EventGranted || e.Event == ledger.EventRevoked {
		e.ReservationID, e.GrantID = "", f[4] // the grant's id is where a hold's is (grant_add)
	}
	if len(f) == 6 {
		if e.Meta, err = ledger.ParseMeta(f[5]); err != nil {
			return ledger.Entry{}, fmt.Errorf("redis history: bad meta in %q: %w", line, err)
		}
	}
	return e, nil
}
