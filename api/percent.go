package api

import (
	"strings"

	"github.com/shopspring/decimal"
)

// Percent is a percentage written as a string such as "80%" or "12.5%": a
// non-negative decimal in plain notation with at most 2 fractional digits,
// then '%'.
type Percent struct {
	// Value is the percentage: 80 for "80%".
	Value decimal.Decimal
}

// NewPercent returns the percentage v ("80%" for 80).
func NewPercent(v decimal.Decimal) *Percent { return &Percent{Value: v} }

// String returns p as it is written, "12.5%".
func (p Percent) String() string { return p.Value.String() + "%" }

// MarshalText writes p as String does.
func (p Percent) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a percentage as ParsePercent does.
func (p *Percent) UnmarshalText(b []byte) error {
	v, err := ParsePercent("", string(b))
	if err != nil {
		return err
	}
	p.Value = v
	return nil
}

// ParsePercent reads s as a Percent and returns its value, or a problem
// naming field: digits, an optional '.' with 1 or 2 digits, then '%'.
func ParsePercent(field, s string) (decimal.Decimal, error) {
	num, ok := strings.CutSuffix(s, "%")
	intPart, frac, dot := strings.Cut(num, ".")
	if !ok || intPart == "" || len(intPart) > 6 || dot && (frac == "" || len(frac) > 2) || !allDigits(intPart) || !allDigits(frac) {
		return decimal.Decimal{}, invalid(CodeInvalidRequest, field, "must be a percentage such as \"80%%\" or \"12.5%%\" (at most 2 decimals)")
	}
	return decimal.RequireFromString(num), nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
