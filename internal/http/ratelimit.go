package http

import (
	"slices"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// maxHeaderInt is the largest integer a header carries: the structured-field
// integer range (RFC 9651: at most 15 digits). Retry-After and the RateLimit
// fields are clamped to it, so every client can parse them.
const maxHeaderInt = 999_999_999_999_999

// clampHeader clamps a whole number of seconds or units to [0, maxHeaderInt];
// ok false (a value past an int64) clamps to maxHeaderInt.
func clampHeader(n int64, ok bool) int64 {
	switch {
	case !ok || n > maxHeaderInt:
		return maxHeaderInt
	case n < 0:
		return 0
	}
	return n
}

// headerInt writes a whole number for a header (already clamped).
func headerInt(n int64) string { return strconv.FormatInt(n, 10) }

// quota is what the RateLimit fields say of one limit of a call
// (draft-ietf-httpapi-ratelimit-headers): the policy's quota q and window w,
// and the bucket's remaining r and reset t, each clamped to maxHeaderInt.
// hasT is false when the call's cost can never fit.
type quota struct {
	name   string
	denied bool
	q, w   int64
	r      int64
	t      int64
	hasT   bool
}

// quotaOf derives the RateLimit values of a decision made under limit l
// (named name in the call).
//
// q is the capacity and r the remaining, both rounded down. For a leaky limit
// w is the seconds a full bucket takes to leak empty (capacity × per / amount)
// and t the seconds the level takes to leak to zero, both rounded up; on a
// denial t is the decision's Retry-After. A periodic limit gives w = the
// period's length and t = the seconds from the decision until it resets,
// both rounded up. A window limit gives w = the window's length and t = the
// seconds until none of the bucket's charges counts any more, rounded up.
// Everything is integer arithmetic on the exact amounts.
func quotaOf(name string, l ledger.Limit, d bucket.Decision) quota {
	qt := quota{
		name:   name,
		denied: !d.Accepted,
		q:      clampHeader(d.Capacity.Floor()),
		r:      clampHeader(d.Remaining.Floor()),
	}
	periodic := l.Period != nil && !d.ResetsAt.IsZero()
	rule := l.Rule()
	window := l.Window != nil && !d.ClearsAt.IsZero()
	switch {
	case window:
		qt.w = ceilSeconds(l.Window.Length)
	case periodic:
		qt.w = ceilSeconds(d.ResetsAt.Sub(d.PeriodStart))
	default:
		qt.w = clampHeader(bucket.LeakTime(rule, rule.Capacity).CeilSeconds())
	}
	switch {
	case d.Accepted && window:
		qt.t, qt.hasT = ceilSeconds(d.ClearsAt.Sub(d.At)), true
	case d.Accepted && periodic:
		qt.t, qt.hasT = ceilSeconds(d.ResetsAt.Sub(d.At)), true
	case d.Accepted:
		qt.t, qt.hasT = clampHeader(bucket.LeakTime(rule, d.Level).CeilSeconds()), true
	case !d.NeverFits:
		qt.t, qt.hasT = clampHeader(d.RetryAfter.CeilSeconds()), true
	}
	return qt
}

// ceilSeconds is d in whole seconds, rounded up (never below zero).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return clampHeader(int64((d+time.Second-1)/time.Second), true)
}

// setRateLimit sets RateLimit-Policy and RateLimit on an answer, one list
// member per limit of the call in the order the limits first appear. When a
// call names a limit more than once (several keys), the member shows the
// bucket with the least remaining, a denied one first.
func setRateLimit(c echo.Context, qs ...quota) {
	order := qs
	if len(qs) > 1 {
		var buf [commonItems]quota // no allocation for a common call
		order = buf[:0]
		for _, q := range qs {
			i := slices.IndexFunc(order, func(o quota) bool { return o.name == q.name })
			switch {
			case i < 0:
				order = append(order, q)
			case tighter(q, order[i]):
				order[i] = q
			}
		}
	}
	// Both fields are written into one pooled buffer, policy then state,
	// and become one string and one two-element slice: two allocations.
	bp := bufPool.Get().(*[]byte)
	b := (*bp)[:0]
	for i, q := range order {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, q.name)
		b = strconv.AppendInt(append(b, ";q="...), q.q, 10)
		b = strconv.AppendInt(append(b, ";w="...), q.w, 10)
	}
	split := len(b)
	for i, q := range order {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, q.name)
		b = strconv.AppendInt(append(b, ";r="...), q.r, 10)
		if q.hasT {
			b = strconv.AppendInt(append(b, ";t="...), q.t, 10)
		}
	}
	both := string(b)
	*bp = b
	bufPool.Put(bp)
	vals := []string{both[:split], both[split:]}
	h := c.Response().Header()
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
}

// tighter says whether a is the more restrictive of two buckets of a limit:
// a denial before an acceptance (t absent = never fits first), then the
// lower remaining, then the longer reset.
func tighter(a, b quota) bool {
	if a.denied != b.denied {
		return a.denied
	}
	if a.r != b.r {
		return a.r < b.r
	}
	switch {
	case !a.hasT:
		return b.hasT
	case !b.hasT:
		return false
	}
	return a.t > b.t
}

// appendSFString appends s as a structured-field String (RFC 9651 3.3.3).
// Limit names are [a-z0-9._-], so only the quotes are ever needed; escaping
// is kept for safety.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
