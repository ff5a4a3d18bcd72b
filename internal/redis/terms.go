package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// Terms on Redis: Go computes them (termsAt, ledger.TermsAt over the
// in-process index of the limit's overrides) and passes them with the span
// of store time in which they hold; the functions check that span and the
// limit's version under their atomicity and add only what lives in the
// bucket's hash and must be read with it: the active grants (with_grants
// in budgetd.lua) and the rollover carry (carry). The end of a temporary
// override that changed a bucket's rule since its last write is Go's too:
// the functions answer E_SWITCH for such a bucket (unswitched), and Go
// settles it through the expiries with ledger.TermsAt (switchBucket) and
// calls again.

// termsAt is ledger.TermsAt of key's bucket under cl at now (the store's
// clock as budgetd sees it), from what Go holds without reading the
// bucket: the stored limit and its overrides. It is the one place the
// Redis store resolves terms for a decision: the override applied
// (Terms.Limit, its pattern Limit.Override, its version OverrideVersion)
// and the instant they hold until (ValidUntil: the override's expiry).
// What lives in the bucket's hash, read under the function's atomicity,
// is added there as TermsAt's later steps add it: the active grants
// (with_grants) and the rollover carry (carry, with the capacity in force
// at the end of the period before, which is termsAt at that instant:
// resolveForKey).
func termsAt(cl cachedLimit, key string, now time.Time) ledger.Terms {
	in := ledger.TermsInput{Limit: cl.l, Key: key, Now: now}
	if cl.ovs != nil {
		in.Overrides = cl.ovs
	}
	return ledger.TermsAt(&in)
}

// spanArg is what follows the limit's version in the functions' arguments
// for key's terms at now (guard in budgetd.lua): "@lo:hi" (µs, "" for
// unbounded), the span of store time in which the override resolved at now
// stays the one that resolves (ledger.SpanAt: from the latest expiry
// crossed to the expiry of the one in force), then "|T" when an override's
// expiry changed the key's rule, T the last such instant
// (Span.LastSwitch): a bucket last written before it is settled by Go
// (switchBucket) before a function decides on it (unswitched). It is ""
// for terms that hold at every instant.
func spanArg(cl cachedLimit, key string, now time.Time) string {
	if cl.ovs == nil {
		return ""
	}
	sp := ledger.SpanAt(cl.ovs, cl.l, key, now)
	if sp.From.IsZero() && sp.Until.IsZero() {
		return ""
	}
	us := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatInt(t.UnixMicro(), 10)
	}
	out := "@" + us(sp.From) + ":" + us(sp.Until)
	if !sp.LastSwitch.IsZero() {
		out += "|" + us(sp.LastSwitch)
	}
	return out
}

// errSwitch: a bucket's rule changed at an override's expiry since its
// last write, and Go settles it first (switchError, retryStale).
var errSwitch = errors.New("a bucket's rule changed at an override's expiry since its last write")

// switchError is errSwitch for bucket bk (its Redis key), the function's
// answer E_SWITCH, with the bucket's fields l, u and w as it read them.
type switchError struct {
	bk     string
	fields []any
}

func (e *switchError) Error() string { return "redis: " + errSwitch.Error() }

func (e *switchError) Unwrap() error { return errSwitch }

// maxSwitches bounds the buckets one operation settles through expiries
// before it gives up (a multi-bucket call may meet one per bucket).
const maxSwitches = 2 * ledger.MaxItems

// switchBucket settles bucket bk through the ends of temporary overrides
// since its last write: its level, time and window slots as stored
// (fields, as the function that answered E_SWITCH read them, or, nil, one
// HMGET), then ledger.TermsAt with that state, whose Settled state
// switch_bucket writes, unless the bucket was written meanwhile. A bucket
// with nothing to settle, or written meanwhile (by a call that switched
// it first), is left as it is: the caller calls again, and a switch
// racing with another instance's costs no reload of the limit cache.
func (s *Store) switchBucket(ctx context.Context, bk string, fields []any) error {
	gen, key, ok := s.k.parseBucket(bk)
	if !ok {
		return fmt.Errorf("redis: bad bucket key %q", bk)
	}
	cl, err := s.limitByGen(ctx, gen)
	if errors.Is(err, ledger.ErrReservationNotFound) {
		return errStale
	}
	if err != nil || cl.ovs == nil {
		return err
	}
	if fields == nil {
		if fields, err = s.client.HMGet(ctx, bk, "l", "u", "w").Result(); err != nil {
			return s.fail(ctx, "switch", err)
		}
	}
	st, us, err := storedState(cl, key, fields)
	if err != nil || st.Updated.IsZero() {
		return err
	}
	t := ledger.TermsAt(&ledger.TermsInput{Limit: cl.l, Key: key, Overrides: cl.ovs, State: st, Now: s.storeNow()})
	if !t.Settled {
		return nil
	}
	tg := target{lim: s.forKey(cl, key), bk: bk, hk: s.k.history(gen, key), slot: slotOf(bk)}
	_, err = s.call(ctx, "switch", false, nil, tg, "", ledger.Idempotency{}, us, t.State.Level.Units(),
		strconv.FormatInt(t.State.Updated.UnixMicro(), 10))
	return err
}

// storedState reads a bucket's level, time and window slots (the fields l,
// u and w, as HMGET answers them) as a bucket.State, and its time as
// stored. Slots cut with another precision than the window in force at the
// bucket's time read as none, as the functions read them (wslots).
func storedState(cl cachedLimit, key string, vs []any) (bucket.State, string, error) {
	l, _ := vs[0].(string)
	us, _ := vs[1].(string)
	w, _ := vs[2].(string)
	if us == "" || us == "0" {
		return bucket.State{}, us, nil
	}
	u, err := strconv.ParseInt(us, 10, 64)
	if err != nil {
		return bucket.State{}, us, fmt.Errorf("redis: bad bucket time %q", us)
	}
	st := bucket.State{Updated: time.UnixMicro(u).UTC()}
	if st.Level, err = amountFromUnits(l); err != nil {
		return bucket.State{}, us, err
	}
	if p, _, ok := strings.Cut(w, "@"); ok {
		win := termsAt(cl, key, st.Updated).Limit.Window
		if win != nil && p == strconv.FormatInt(win.Precision.Microseconds(), 10) {
			if st.Slots, err = parseSlots(w); err != nil {
				return bucket.State{}, us, err
			}
		}
	}
	return st, us, nil
}
