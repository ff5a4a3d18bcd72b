package ledger

import (
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// The domain owns its bounds. Package api keeps copies of those the wire
// contract and the OpenAPI document state (api.MinWindow, api.MaxGrace,
// api.DefaultPrecision, api.ParsePercent, the event types, …) because a
// public package imports nothing internal; limits_test.go fails when a
// copy drifts from the value here.

// Bounds of a rolling window (SPEC "Rolling windows").
const (
	// MinWindow and MaxWindow bound a window's length.
	MinWindow = time.Second
	MaxWindow = 8760 * time.Hour
	// MaxWindowSlots is the most slots a window's precision may cut it into.
	MaxWindowSlots = 1000
	// minDefaultSlots is the fewest slots a default precision gives.
	minDefaultSlots = 60
)

// MaxGrace is the largest grace of a soft limit, in percent.
const MaxGrace = 100

// precisionLadder is where a window's default precision is taken from,
// largest first.
var precisionLadder = [...]time.Duration{
	24 * time.Hour, time.Hour, 10 * time.Minute, time.Minute, 10 * time.Second,
	time.Second, 100 * time.Millisecond, 10 * time.Millisecond, time.Millisecond,
}

// DefaultPrecision returns the precision of a window of length when none is
// given: the largest of 24h, 1h, 10m, 1m, 10s, 1s, 100ms, 10ms and 1ms that
// divides it into at least 60 slots (1m → 1s, 720h → 1h, 8760h → 24h), and
// false when none does within MaxWindowSlots, in which case the precision
// must be given.
func DefaultPrecision(length time.Duration) (time.Duration, bool) {
	for _, p := range precisionLadder {
		if length%p == 0 && length/p >= minDefaultSlots && length/p <= MaxWindowSlots {
			return p, true
		}
	}
	return 0, false
}

// parsePercent reads s as a percentage — digits (at most 6), an optional
// '.' with 1 or 2 digits, then '%' — and returns its value (80 for "80%");
// ok is false for anything else. Range checks are the caller's.
func parsePercent(s string) (v decimal.Decimal, ok bool) {
	num, ok := strings.CutSuffix(s, "%")
	intPart, frac, dot := strings.Cut(num, ".")
	if !ok || intPart == "" || len(intPart) > 6 || dot && (frac == "" || len(frac) > 2) || !allDigits(intPart) || !allDigits(frac) {
		return decimal.Decimal{}, false
	}
	return decimal.RequireFromString(num), true
}

// allDigits reports whether s is made of ASCII digits only ("" is).
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
