package redis

import (
	"context"
	"crypto/rand"
	_ "embed"
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
	"github.com/shopspring/decimal"
)

var (
	//go:embed lua/bigint.lua
	bigintLua string
	//go:embed lua/fast.lua
	fastLua string
	//go:embed lua/bucket.lua
	bucketLua string
	//go:embed lua/fillup.lua
	fillupLua string
	//go:embed lua/ops.lua
	opsLua string
	//go:embed lua/limits.lua
	limitsLua string
)

// bucketScript is the entry script of an operation: the shared parts, the
// file that holds op and a call of it. Each script defines only the Lua
// functions its operations may use, since defining one costs time on every
// call.
func bucketScript(file, op string) *script {
	return newScript(bigintLua + "\n" + fastLua + "\n" + bucketLua + "\n" + file + "\nreturn " + op + "()\n")
}

var (
	fillupScript      = bucketScript(fillupLua, "op_fillup")
	inspectScript     = bucketScript(opsLua, "op_inspect")
	drainScript       = bucketScript(opsLua, "op_drain")
	settleScript      = bucketScript(opsLua, "op_settle")
	reserveScript     = bucketScript(opsLua, "op_reserve")
	resolveScript     = bucketScript(opsLua, "op_resolve")
	reservationScript = bucketScript(opsLua, "op_reservation")
	historyScript     = bucketScript(opsLua, "op_history")
)

// units is an amount as an integer number of 10^-12, the scripts' unit.
func units(d decimal.Decimal) string { return d.Shift(bucket.LevelScale).BigInt().String() }

// fromUnits is the inverse of units.
func fromUnits(s string) (decimal.Decimal, error) {
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("redis: bad amount %q: %w", s, err)
	}
	return d.Shift(-bucket.LevelScale), nil
}

// limitDoc is the limit as a script carries it back (opaque to Lua), so a
// replayed outcome shows the limit of the original call.
type limitDoc struct {
	N  string `json:"n"`
	C  string `json:"c"`
	A  string `json:"a"`
	P  int64  `json:"p"`
	H  bool   `json:"h"`
	CT int64  `json:"ct"`
	UT int64  `json:"ut"`
}

func encodeLimit(l ledger.Limit) string {
	micros := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMicro()
	}
	b, _ := json.Marshal(limitDoc{N: l.Name, C: l.Capacity.String(), A: l.LeakAmount.String(), P: l.LeakPer.Microseconds(),
		H: l.History, CT: micros(l.CreatedAt), UT: micros(l.UpdatedAt)})
	return string(b)
}

func decodeLimit(s string) (ledger.Limit, error) {
	var d limitDoc
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return ledger.Limit{}, fmt.Errorf("redis: bad limit document: %w", err)
	}
	c, err1 := decimal.NewFromString(d.C)
	a, err2 := decimal.NewFromString(d.A)
	if err1 != nil || err2 != nil {
		return ledger.Limit{}, fmt.Errorf("redis: bad limit document %q", s)
	}
	return ledger.Limit{Name: d.N, Capacity: c, LeakAmount: a, LeakPer: time.Duration(d.P) * time.Microsecond,
		History: d.H, CreatedAt: fromMicros(d.CT), UpdatedAt: fromMicros(d.UT)}, nil
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
	return target{ref: ref, lim: cl, bk: bk, hk: s.k.history(cl.gen, ref.Key), slot: slotOf(bk)}, nil
}

// desc is the ARGV that describe a bucket's limit to a script (DESC in
// bucket.lua). On a standalone server the script also checks the limit's
// definition key against the version decided with (errStale when it
// changed); in Redis Cluster that key is in another slot.
func (s *Store) desc(t target) []any {
	a := &t.lim.args
	defKey := ""
	if !s.cluster {
		defKey = a.defKey
	}
	return []any{s.k.holdBase(t.lim.gen, t.slot), a.capacity, a.leakAmount, a.leakPer, a.history, a.doc, defKey, a.version}
}

// limitArgs are the parts of a bucket descriptor that depend only on the
// limit, formatted once when the limit is cached rather than on every call.
type limitArgs struct {
	capacity   string // units
	leakAmount string // units, divided by gcd(amount, per)
	leakPer    string // µs, divided by gcd(amount, per)
	history    string
	doc        string // encodeLimit
	defKey     string // the definition key (standalone only)
	version    string // "generation:version"
}

func newLimitArgs(k keys, l ledger.Limit, gen int64, version string) limitArgs {
	a, p := leakRatio(l)
	return limitArgs{capacity: units(l.Capacity), leakAmount: a, leakPer: p, history: boolArg(l.History),
		doc: encodeLimit(l), defKey: k.limitDef(l.Name), version: strconv.FormatInt(gen, 10) + ":" + version}
}

// leakRatio returns the leak amount (units) and period (µs) divided by their
// greatest common divisor. The leak floor(amount*dt/per) is the same with
// either pair, but the reduced one keeps amount*dt below 2^53 far more often,
// which is when the scripts compute it in plain Lua numbers (fast.lua).
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

// errStale: a script saw that the limit changed since it was cached.
var errStale = errors.New("limit definition changed")

// withFreshLimits runs op, and again with the limit cache emptied when the
// script reports that a limit changed under it.
func withFreshLimits[T any](s *Store, op func() (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		out, err := op()
		if !errors.Is(err, errStale) {
			return out, err
		}
		if attempt == 2 {
			var zero T
			return zero, fmt.Errorf("redis: %w: limit definitions kept changing", ledger.ErrUnavailable)
		}
		s.forgetAll()
	}
}

// run runs a script and returns its JSON body and whether it was replayed.
// Domain errors reported by the script become the matching sentinel.
func (s *Store) run(ctx context.Context, op string, sc *script, ro bool, keys []string, args ...any) (string, bool, error) {
	res, err := s.call(ctx, op, sc, ro, keys, args...)
	if err != nil {
		return "", false, err
	}
	if len(res) != 2 {
		return "", false, fmt.Errorf("redis %s: unexpected reply %q", op, res)
	}
	return res[1], res[0] == "replay", nil
}

// call runs a script and returns its reply: "ok" and the answer, or
// "replay" and the stored JSON body. Domain errors reported by the script
// become the matching sentinel.
func (s *Store) call(ctx context.Context, op string, sc *script, ro bool, keys []string, args ...any) ([]string, error) {
	res, err := s.batch.do(ctx, &scriptCall{sc: sc, ro: ro, keys: keys, args: args}).StringSlice()
	if err != nil {
		if strings.Contains(err.Error(), "BUDGETD_STALE_LIMIT") {
			return nil, errStale
		}
		return nil, s.fail(ctx, op, err)
	}
	if len(res) < 2 {
		return nil, fmt.Errorf("redis %s: unexpected reply %q", op, res)
	}
	if res[0] == "ok" || res[0] == "replay" {
		return res, nil
	}
	switch res[1] {
	case "reused":
		return nil, ledger.ErrIdempotencyKeyReused
	case "not_found":
		return nil, ledger.ErrReservationNotFound
	case "too_many_holds":
		return nil, ledger.ErrTooManyHolds
	case "level_overflow":
		return nil, ledger.ErrLevelOverflow
	}
	return nil, fmt.Errorf("redis %s: script error %q", op, res[1])
}

// snapJSON is a bucket as a script reports it.
type snapJSON struct {
	L    string `json:"l"`
	U    string `json:"u"`
	H    string `json:"h"`
	Lim  string `json:"lim"`
	Now  string `json:"now"`
	Fits bool   `json:"fits"`
}

func parseMicros(s string) (time.Time, error) {
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: bad time %q: %w", s, err)
	}
	return fromMicros(us), nil
}

// snapshot converts a script's bucket into a ledger.Snapshot, as the memory
// store would build it. known is the limit the call was made with: when the
// script reports that very limit, or none (the flat answer of a Fillup), it
// is used as is; only a replayed outcome may carry another one to decode.
func (j snapJSON) snapshot(now time.Time, known cachedLimit) (ledger.Snapshot, error) {
	l := known.l
	if j.Lim != "" && j.Lim != known.args.doc {
		var err error
		if l, err = decodeLimit(j.Lim); err != nil {
			return ledger.Snapshot{}, err
		}
	}
	lvl, err := fromUnits(j.L)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	upd, err := parseMicros(j.U)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	st := bucket.State{Level: lvl, Updated: upd}
	if j.H != "" {
		for _, h := range strings.Split(j.H, ",") {
			a, e, _ := strings.Cut(h, ":")
			amt, err := fromUnits(a)
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

// Inspect returns a bucket's state; the script only reads.
func (s *Store) Inspect(ctx context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	return withFreshLimits(s, func() (ledger.Snapshot, error) { return s.inspect(ctx, ref) })
}

// inspect is one attempt of Inspect.
func (s *Store) inspect(ctx context.Context, ref ledger.BucketRef) (ledger.Snapshot, error) {
	t, err := s.target(ctx, ref)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	body, _, err := s.run(ctx, "inspect", inspectScript, true, []string{t.bk}, append([]any{s.nowArg()}, s.desc(t)...)...)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	var j snapJSON
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return ledger.Snapshot{}, fmt.Errorf("redis inspect: %w", err)
	}
	now, err := parseMicros(j.Now)
	if err != nil {
		return ledger.Snapshot{}, err
	}
	return j.snapshot(now, t.lim)
}

// Fillup charges every item or none in one script call. In Redis Cluster all
// items must share a hash slot (ledger.ErrCrossSlot otherwise).
func (s *Store) Fillup(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
	return withFreshLimits(s, func() (ledger.FillupOutcome, error) { return s.fillup(ctx, items, idem) })
}

// fillup is one attempt of Fillup.
func (s *Store) fillup(ctx context.Context, items []ledger.Charge, idem ledger.Idempotency) (ledger.FillupOutcome, error) {
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
	keys := make([]string, 0, 2*len(ts)+1)
	args := []any{s.nowArg(), idem.Hash, len(ts)}
	for i, t := range ts {
		keys = append(keys, t.bk, t.hk)
		args = append(args, s.desc(t)...)
		args = append(args, units(items[i].Cost))
	}
	if idem.Key != "" {
		if len(ts) == 1 {
			keys = append(keys, s.k.idemBucket(ts[0].lim.gen, ts[0].ref.Key, idem.Scope, idem.Key))
		} else {
			keys = append(keys, s.k.idemMulti(ts[0].ref.Key, idem.Scope, idem.Key))
		}
	} else {
		args[1] = ""
	}
	res, err := s.call(ctx, "fillup", fillupScript, false, keys, args...)
	if err != nil {
		return ledger.FillupOutcome{}, err
	}
	var j struct {
		Now   string     `json:"now"`
		Acc   bool       `json:"acc"`
		Items []snapJSON `json:"items"`
	}
	replayed := res[0] == "replay"
	if replayed {
		if err := json.Unmarshal([]byte(res[1]), &j); err != nil {
			return ledger.FillupOutcome{}, fmt.Errorf("redis fillup: %w", err)
		}
	} else {
		// The flat answer of fillup.lua: now, accepted, then level,
		// updated, holds and fits per item, each decided with the limit
		// passed in (Lim stays empty: snapshot uses the known one).
		if len(res) != 3+4*len(ts) {
			return ledger.FillupOutcome{}, fmt.Errorf("redis fillup: unexpected reply %q", res)
		}
		j.Now, j.Acc = res[1], res[2] == "1"
		j.Items = make([]snapJSON, len(ts))
		for i := range j.Items {
			f := res[3+4*i:]
			j.Items[i] = snapJSON{L: f[0], U: f[1], H: f[2], Fits: f[3] == "1"}
		}
	}
	now, err := parseMicros(j.Now)
	if err != nil {
		return ledger.FillupOutcome{}, err
	}
	out := ledger.FillupOutcome{Accepted: j.Acc, Replayed: replayed, Items: make([]ledger.ItemOutcome, len(j.Items))}
	for i, it := range j.Items {
		sn, err := it.snapshot(now, ts[min(i, len(ts)-1)].lim)
		if err != nil {
			return ledger.FillupOutcome{}, err
		}
		out.Items[i] = ledger.ItemOutcome{Fits: it.Fits, Snapshot: sn}
	}
	return out, nil
}

// idemArgs returns the idempotency key (appended to keys) and hash ARGV.
func idemArgs(keys []string, idem ledger.Idempotency, key func() string) ([]string, string) {
	if idem.Key == "" {
		return keys, ""
	}
	return append(keys, key()), idem.Hash
}

// Drain lowers a bucket's level, clamped at zero.
func (s *Store) Drain(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, idem ledger.Idempotency) (ledger.DrainOutcome, error) {
	return withFreshLimits(s, func() (ledger.DrainOutcome, error) { return s.drain(ctx, ref, amount, idem) })
}

// drain is one attempt of Drain.
func (s *Store) drain(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, idem ledger.Idempotency) (ledger.DrainOutcome, error) {
	t, err := s.target(ctx, ref)
	if err != nil {
		return ledger.DrainOutcome{}, err
	}
	keys, ih := idemArgs([]string{t.bk, t.hk}, idem, func() string { return s.k.idemBucket(t.lim.gen, ref.Key, idem.Scope, idem.Key) })
	args := append([]any{s.nowArg(), ih}, s.desc(t)...)
	body, replayed, err := s.run(ctx, "drain", drainScript, false, keys, append(args, units(amount))...)
	if err != nil {
		return ledger.DrainOutcome{}, err
	}
	var j struct {
		snapJSON
		Removed string `json:"removed"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return ledger.DrainOutcome{}, fmt.Errorf("redis drain: %w", err)
	}
	now, err := parseMicros(j.Now)
	if err != nil {
		return ledger.DrainOutcome{}, err
	}
	sn, err := j.snapshot(now, t.lim)
	if err != nil {
		return ledger.DrainOutcome{}, err
	}
	removed, err := fromUnits(j.Removed)
	if err != nil {
		return ledger.DrainOutcome{}, err
	}
	return ledger.DrainOutcome{Removed: removed, Snapshot: sn, Replayed: replayed}, nil
}

// holdJSON is a hold record as a script reports it.
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

func (h holdJSON) reservation() (ledger.Reservation, error) {
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
func (s *Store) Reserve(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, ttl time.Duration, idem ledger.Idempotency) (ledger.ReserveOutcome, error) {
	return withFreshLimits(s, func() (ledger.ReserveOutcome, error) { return s.reserve(ctx, ref, amount, ttl, idem) })
}

// reserve is one attempt of Reserve.
func (s *Store) reserve(ctx context.Context, ref ledger.BucketRef, amount decimal.Decimal, ttl time.Duration, idem ledger.Idempotency) (ledger.ReserveOutcome, error) {
	t, err := s.target(ctx, ref)
	if err != nil {
		return ledger.ReserveOutcome{}, err
	}
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return ledger.ReserveOutcome{}, err
	}
	id := holdID(t.lim.gen, t.slot, hex.EncodeToString(rnd[:]))
	keys, ih := idemArgs([]string{t.bk, t.hk}, idem, func() string { return s.k.idemBucket(t.lim.gen, ref.Key, idem.Scope, idem.Key) })
	args := append([]any{s.nowArg(), ih}, s.desc(t)...)
	args = append(args, units(amount), ttl.Microseconds(), id, ref.Limit, encodeKey(ref.Key))
	body, replayed, err := s.run(ctx, "reserve", reserveScript, false, keys, args...)
	if err != nil {
		return ledger.ReserveOutcome{}, err
	}
	var j struct {
		Now string   `json:"now"`
		Acc bool     `json:"acc"`
		Res holdJSON `json:"res"`
		B   snapJSON `json:"b"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return ledger.ReserveOutcome{}, fmt.Errorf("redis reserve: %w", err)
	}
	now, err := parseMicros(j.Now)
	if err != nil {
		return ledger.ReserveOutcome{}, err
	}
	out := ledger.ReserveOutcome{Accepted: j.Acc, Replayed: replayed}
	if out.Snapshot, err = j.B.snapshot(now, t.lim); err != nil {
		return ledger.ReserveOutcome{}, err
	}
	if j.Acc {
		if out.Reservation, err = j.Res.reservation(); err != nil {
			return ledger.ReserveOutcome{}, err
		}
	}
	return out, nil
}

// Commit ends a hold and charges amount (the held amount when null).
func (s *Store) Commit(ctx context.Context, id string, amount decimal.NullDecimal, overrun bool, idem ledger.Idempotency) (ledger.ResolveOutcome, error) {
	a := ""
	if amount.Valid {
		a = units(amount.Decimal)
	}
	return s.resolve(ctx, "commit", id, "c", a, overrun, idem)
}

// Release ends a hold without charging.
func (s *Store) Release(ctx context.Context, id string, idem ledger.Idempotency) (ledger.ResolveOutcome, error) {
	return s.resolve(ctx, "release", id, "r", "", false, idem)
}

func (s *Store) resolve(ctx context.Context, op, id, mode, amount string, overrun bool, idem ledger.Idempotency) (ledger.ResolveOutcome, error) {
	return withFreshLimits(s, func() (ledger.ResolveOutcome, error) { return s.resolveOnce(ctx, op, id, mode, amount, overrun, idem) })
}

// resolveOnce is one attempt of Commit or Release.
func (s *Store) resolveOnce(ctx context.Context, op, id, mode, amount string, overrun bool, idem ledger.Idempotency) (ledger.ResolveOutcome, error) {
	g, slot, ok := parseHoldID(id)
	if !ok {
		return ledger.ResolveOutcome{}, ledger.ErrReservationNotFound
	}
	cl, err := s.limitByGen(ctx, g)
	if err != nil {
		return ledger.ResolveOutcome{}, err
	}
	t := target{lim: cl, slot: slot}
	keys, ih := idemArgs([]string{s.k.holdBase(g, slot) + id}, idem, func() string { return s.k.idemHold(g, slot, id, idem.Scope, idem.Key) })
	args := append([]any{s.nowArg(), ih, mode, amount, boolArg(overrun), s.k.gen(g)}, s.desc(t)...)
	body, replayed, err := s.run(ctx, op, resolveScript, false, keys, args...)
	if err != nil {
		return ledger.ResolveOutcome{}, err
	}
	var j struct {
		Now     string   `json:"now"`
		Refusal string   `json:"refusal"`
		Res     holdJSON `json:"res"`
		B       snapJSON `json:"b"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return ledger.ResolveOutcome{}, fmt.Errorf("redis %s: %w", op, err)
	}
	now, err := parseMicros(j.Now)
	if err != nil {
		return ledger.ResolveOutcome{}, err
	}
	out := ledger.ResolveOutcome{Refusal: j.Refusal, Replayed: replayed}
	if out.Snapshot, err = j.B.snapshot(now, t.lim); err != nil {
		return ledger.ResolveOutcome{}, err
	}
	if out.Reservation, err = j.Res.reservation(); err != nil {
		return ledger.ResolveOutcome{}, err
	}
	return out, nil
}

// Reservation returns a hold as stored and the store's clock.
func (s *Store) Reservation(ctx context.Context, id string) (ledger.Reservation, time.Time, error) {
	g, slot, ok := parseHoldID(id)
	if !ok {
		return ledger.Reservation{}, time.Time{}, ledger.ErrReservationNotFound
	}
	if _, err := s.limitByGen(ctx, g); err != nil {
		return ledger.Reservation{}, time.Time{}, err
	}
	body, _, err := s.run(ctx, "reservation", reservationScript, true, []string{s.k.holdBase(g, slot) + id}, s.nowArg())
	if err != nil {
		return ledger.Reservation{}, time.Time{}, err
	}
	var j struct {
		Now string   `json:"now"`
		Res holdJSON `json:"res"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return ledger.Reservation{}, time.Time{}, fmt.Errorf("redis reservation: %w", err)
	}
	now, err := parseMicros(j.Now)
	if err != nil {
		return ledger.Reservation{}, time.Time{}, err
	}
	r, err := j.Res.reservation()
	return r, now, err
}

// History lists a bucket's entries newest first, recording due expiries.
func (s *Store) History(ctx context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error) {
	type page struct {
		entries []ledger.Entry
		next    string
	}
	p, err := withFreshLimits(s, func() (page, error) {
		e, next, err := s.history(ctx, ref, cursor, n)
		return page{e, next}, err
	})
	return p.entries, p.next, err
}

// history is one attempt of History.
func (s *Store) history(ctx context.Context, ref ledger.BucketRef, cursor string, n int) ([]ledger.Entry, string, error) {
	ct, cid := "", "0"
	if cursor != "" {
		var ok bool
		ct, cid, ok = strings.Cut(cursor, ".")
		_, err1 := strconv.ParseInt(ct, 10, 64)
		_, err2 := strconv.ParseInt(cid, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, "", &ledger.InvalidError{Code: "invalid_request", Field: "cursor", Reason: "malformed cursor"}
		}
	}
	t, err := s.target(ctx, ref)
	if err != nil {
		return nil, "", err
	}
	if !t.lim.l.History {
		return nil, "", nil
	}
	if n < 0 {
		n = 0
	}
	args := append([]any{s.nowArg()}, s.desc(t)...)
	body, _, err := s.run(ctx, "history", historyScript, false, []string{t.bk, t.hk}, append(args, ct, cid, n)...)
	if err != nil {
		return nil, "", err
	}
	var j struct {
		E string `json:"e"`
	}
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return nil, "", fmt.Errorf("redis history: %w", err)
	}
	var out []ledger.Entry
	if j.E != "" {
		for _, line := range strings.Split(j.E, "\n") {
			f := strings.SplitN(line, "|", 5)
			if len(f) != 5 {
				return nil, "", fmt.Errorf("redis history: bad entry %q", line)
			}
			at, err := parseMicros(f[0])
			if err != nil {
				return nil, "", err
			}
			id, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return nil, "", fmt.Errorf("redis history: bad entry %q", line)
			}
			amt, err := fromUnits(f[3])
			if err != nil {
				return nil, "", err
			}
			out = append(out, ledger.Entry{ID: strconv.FormatInt(id, 10), Time: at, Event: ledger.Event(f[2]), Amount: amt, ReservationID: f[4]})
		}
	}
	if len(out) > n && n > 0 {
		out = out[:n]
		last := out[n-1]
		return out, fmt.Sprintf("%d.%s", last.Time.UnixMicro(), last.ID), nil
	}
	return out, "", nil
}
