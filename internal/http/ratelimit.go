package http

import (
	"math/big"
	"strings"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"
)

// maxHeaderInt is the largest integer a header carries: the structured-field
// integer range (RFC 9651: at most 15 digits). Retry-After and the RateLimit
// fields are clamped to it, so every client can parse them.
var maxHeaderInt = decimal.RequireFromString("999999999999999")

// headerInt writes a whole, non-negative number for a header, clamped to
// maxHeaderInt.
func headerInt(d decimal.Decimal) string {
	switch {
	case d.Sign() <= 0:
		return "0"
	case d.GreaterThan(maxHeaderInt):
		return maxHeaderInt.String()
	}
	return d.Truncate(0).String()
}

// quota is what the RateLimit fields say of one limit of a call
// (draft-ietf-httpapi-ratelimit-headers): the policy's quota q and window w,
// and the bucket's remaining r and reset t. t is nil when the call's cost can
// never fit.
type quota struct {
	name   string
	denied bool
	q, w   decimal.Decimal
	r      decimal.Decimal
	t      *decimal.Decimal
}

// quotaOf derives the RateLimit values of a decision made under limit l
// (named name in the call).
//
// q is the capacity and r the remaining, both rounded down. For a leaky limit
// w is the seconds a full bucket takes to leak empty (capacity × per / amount)
// and t the seconds the level takes to leak to zero, both rounded up; on a
// denial t is the decision's Retry-After. A periodic limit gives w = the
// period's length and t = the seconds from the decision until it resets,
// both rounded up.
func quotaOf(name string, l ledger.Limit, d bucket.Decision) quota {
	qt := quota{
		name:   name,
		denied: !d.Accepted,
		q:      d.Capacity.Floor(),
		r:      d.Remaining.Floor(),
	}
	periodic := l.Period != nil && !d.ResetsAt.IsZero()
	if periodic {
		qt.w = ceilSeconds(d.ResetsAt.Sub(d.PeriodStart))
	} else {
		qt.w = leakSeconds(l, l.Capacity)
	}
	switch {
	case d.Accepted && periodic:
		t := ceilSeconds(d.ResetsAt.Sub(d.At))
		qt.t = &t
	case d.Accepted:
		t := leakSeconds(l, d.Level)
		qt.t = &t
	case !d.NeverFits:
		t := d.RetryAfter.Ceil()
		qt.t = &t
	}
	return qt
}

// ceilSeconds is d in whole seconds, rounded up (never below zero).
func ceilSeconds(d time.Duration) decimal.Decimal {
	if d <= 0 {
		return decimal.Zero
	}
	return decimal.NewFromInt(int64((d + time.Second - 1) / time.Second))
}

// leakSeconds is the time, in whole seconds rounded up, that a level of
// amount takes to leak to zero under the leaky limit l: amount × per /
// leak amount, computed exactly in integers.
func leakSeconds(l ledger.Limit, amount decimal.Decimal) decimal.Decimal {
	if amount.Sign() <= 0 || l.LeakAmount.Sign() <= 0 {
		return decimal.Zero
	}
	// amount = a × 10^ea, leak = b × 10^eb, per = us × 10^-6 s:
	// seconds = a × us / b × 10^(ea − eb − 6).
	num := new(big.Int).Mul(amount.Coefficient(), big.NewInt(l.LeakPer.Microseconds()))
	den := l.LeakAmount.Coefficient()
	if e := int64(amount.Exponent()) - int64(l.LeakAmount.Exponent()) - 6; e > 0 {
		num.Mul(num, new(big.Int).Exp(big.NewInt(10), big.NewInt(e), nil))
	} else if e < 0 {
		den.Mul(den, new(big.Int).Exp(big.NewInt(10), big.NewInt(-e), nil))
	}
	q, m := num.QuoRem(num, den, new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return decimal.NewFromBigInt(q, 0)
}

// setRateLimit sets RateLimit-Policy and RateLimit on an answer, one list
// member per limit of the call in the order the limits first appear. When a
// call names a limit more than once (several keys), the member shows the
// bucket with the least remaining, a denied one first.
func setRateLimit(c echo.Context, qs ...quota) {
	order := qs
	if len(qs) > 1 {
		order = nil
		index := map[string]int{}
		for _, q := range qs {
			i, seen := index[q.name]
			switch {
			case !seen:
				index[q.name] = len(order)
				order = append(order, q)
			case tighter(q, order[i]):
				order[i] = q
			}
		}
	}
	policy := make([]string, len(order))
	state := make([]string, len(order))
	for i, q := range order {
		policy[i] = sfString(q.name) + ";q=" + headerInt(q.q) + ";w=" + headerInt(q.w)
		state[i] = sfString(q.name) + ";r=" + headerInt(q.r)
		if q.t != nil {
			state[i] += ";t=" + headerInt(*q.t)
		}
	}
	h := c.Response().Header()
	h.Set("RateLimit-Policy", strings.Join(policy, ", "))
	h.Set("RateLimit", strings.Join(state, ", "))
}

// tighter says whether a is the more restrictive of two buckets of a limit:
// a denial before an acceptance (t absent = never fits first), then the
// lower remaining, then the longer reset.
func tighter(a, b quota) bool {
	if a.denied != b.denied {
		return a.denied
	}
	if a.r.Cmp(b.r) != 0 {
		return a.r.LessThan(b.r)
	}
	switch {
	case a.t == nil:
		return b.t != nil
	case b.t == nil:
		return false
	}
	return a.t.GreaterThan(*b.t)
}

// sfString is a structured-field String (RFC 9651 3.3.3). Limit names are
// [a-z0-9._-], so only the quotes are ever needed; escaping is kept for
// safety.
func sfString(s string) string {
	if strings.ContainsAny(s, `"\`) {
		s = sfEscaper.Replace(s)
	}
	return `"` + s + `"`
}

var sfEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)
