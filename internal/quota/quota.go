// Package quota derives the IETF RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) of a decision: what an answer
// says of each limit of a call in RateLimit-Policy and RateLimit. The HTTP
// API sets them as headers; the Envoy rate-limit service puts the same
// fields in response_headers_to_add, so both write them from here.
package quota

import (
	"slices"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// MaxInt is the largest integer a header carries: the structured-field
// integer range (RFC 9651: at most 15 digits). Retry-After and the RateLimit
// fields are clamped to it, so every client can parse them.
const MaxInt = 999_999_999_999_999

// Clamp clamps a whole number of seconds or units to [0, MaxInt]; ok false
// (a value past an int64) clamps to MaxInt.
func Clamp(n int64, ok bool) int64 {
	switch {
	case !ok || n > MaxInt:
		return MaxInt
	case n < 0:
		return 0
	}
	return n
}

// Quota is what the RateLimit fields say of one limit of a call: the
// policy's quota Q and window W, and the bucket's remaining R and reset T,
// each clamped to MaxInt. HasT is false when the call's cost can never fit.
// Reset is T before it was rounded up to whole seconds (microseconds, as
// the decision knows it), for answers that carry a duration.
type Quota struct {
	Name   string
	Denied bool
	Q, W   int64
	R      int64
	T      int64
	HasT   bool
	Reset  time.Duration
}

// Of derives the RateLimit values of a decision made under limit l (named
// name in the call).
//
// Q is the capacity and R the remaining, both rounded down. For a leaky
// limit W is the seconds a full bucket takes to leak empty (capacity × per
// / amount) and T the seconds the level takes to leak to zero, both rounded
// up; on a denial T is the decision's Retry-After. A periodic limit gives
// W = the period's length and T = the seconds from the decision until it
// resets, both rounded up. A window limit gives W = the window's length and
// T = the seconds until none of the bucket's charges counts any more,
// rounded up. Everything is integer arithmetic on the exact amounts.
func Of(name string, l ledger.Limit, d bucket.Decision) Quota {
	qt := Quota{
		Name:   name,
		Denied: !d.Accepted,
		Q:      Clamp(d.Capacity.Floor()),
		R:      Clamp(d.Remaining.Floor()),
	}
	periodic := l.Period != nil && !d.ResetsAt.IsZero()
	rule := l.Rule()
	window := l.Window != nil && !d.ClearsAt.IsZero()
	switch {
	case window:
		qt.W = ceilSeconds(l.Window.Length)
	case periodic:
		qt.W = ceilSeconds(d.ResetsAt.Sub(d.PeriodStart))
	default:
		qt.W = Clamp(bucket.LeakTime(rule, rule.Capacity).CeilSeconds())
	}
	switch {
	case d.Accepted && window:
		qt.Reset, qt.HasT = d.ClearsAt.Sub(d.At), true
		qt.T = ceilSeconds(qt.Reset)
	case d.Accepted && periodic:
		qt.Reset, qt.HasT = d.ResetsAt.Sub(d.At), true
		qt.T = ceilSeconds(qt.Reset)
	case d.Accepted:
		leak := bucket.LeakTime(rule, d.Level)
		qt.Reset, qt.T, qt.HasT = leak.Duration(), Clamp(leak.CeilSeconds()), true
	case !d.NeverFits:
		qt.Reset, qt.T, qt.HasT = d.RetryAfter.Duration(), Clamp(d.RetryAfter.CeilSeconds()), true
	}
	qt.Reset = max(qt.Reset, 0)
	return qt
}

// ceilSeconds is d in whole seconds, rounded up (never below zero).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return Clamp(int64((d+time.Second-1)/time.Second), true)
}

// commonLimits is how many limits a call is expected to name at most: up
// to that many, merging them allocates nothing.
const commonLimits = 8

// AppendFields appends the values of RateLimit-Policy and then of RateLimit
// to b, one list member per limit of the call in the order the limits first
// appear, and returns where the second begins. When a call names a limit
// more than once (several keys), the member shows the bucket with the
// least remaining, a denied one first.
func AppendFields(b []byte, qs ...Quota) (out []byte, split int) {
	order := qs
	if len(qs) > 1 {
		var buf [commonLimits]Quota // no allocation for a common call
		order = buf[:0]
		for _, q := range qs {
			i := slices.IndexFunc(order, func(o Quota) bool { return o.Name == q.Name })
			switch {
			case i < 0:
				order = append(order, q)
			case tighter(q, order[i]):
				order[i] = q
			}
		}
	}
	for i, q := range order {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, q.Name)
		b = strconv.AppendInt(append(b, ";q="...), q.Q, 10)
		b = strconv.AppendInt(append(b, ";w="...), q.W, 10)
	}
	split = len(b)
	for i, q := range order {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendSFString(b, q.Name)
		b = strconv.AppendInt(append(b, ";r="...), q.R, 10)
		if q.HasT {
			b = strconv.AppendInt(append(b, ";t="...), q.T, 10)
		}
	}
	return b, split
}

// tighter says whether a is the more restrictive of two buckets of a limit:
// a denial before an acceptance (t absent = never fits first), then the
// lower remaining, then the longer reset.
func tighter(a, b Quota) bool {
	if a.Denied != b.Denied {
		return a.Denied
	}
	if a.R != b.R {
		return a.R < b.R
	}
	switch {
	case !a.HasT:
		return b.HasT
	case !b.HasT:
		return false
	}
	return a.T > b.T
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
