package api

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// Bounds on input that budgetd enforces; Validate checks them before a
// request is sent. They, the window bounds, MaxGrace, MaxThresholds,
// DefaultPrecision, ParsePercent and the event types are copies of what
// budgetd's domain (internal/ledger) owns, kept here because a public package
// imports nothing internal; internal/ledger/limits_test.go fails when one
// drifts.
const (
	// MaxScale is the most fractional digits an amount may carry.
	MaxScale = 6
	// MaxKeyBytes is the longest bucket key, in bytes of UTF-8.
	MaxKeyBytes = 256
	// MaxItems is the most items of one multi-bucket Fillup.
	MaxItems = 64
	// MaxPer is the longest leak interval.
	MaxPer = 87600 * time.Hour
	// MaxMetaEntries is the most entries of one Meta.
	MaxMetaEntries = 16
	// MaxMetaValueBytes is the longest Meta value, in bytes.
	MaxMetaValueBytes = 256
	// MaxMetaBytes bounds the keys and values of one Meta together.
	MaxMetaBytes = 2048
)

// MaxAmount is the largest amount budgetd accepts: 10^12.
var MaxAmount = decimal.New(1, 12)

// invalid is a problem found before sending: Status 0.
func invalid(code Code, field, format string, args ...any) *Problem {
	return &Problem{Code: code, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// CheckAmount refuses an amount budgetd would refuse or that cannot be
// written exactly: negative, zero when positive is set, above MaxAmount, or
// with more than MaxScale fractional digits. The error is a *Problem with
// Code invalid_amount naming field.
func CheckAmount(field string, d decimal.Decimal, positive bool) error {
	switch {
	case d.Sign() < 0:
		return invalid(CodeInvalidAmount, field, "%s is negative", d)
	case positive && d.Sign() == 0:
		return invalid(CodeInvalidAmount, field, "must be greater than zero")
	case d.GreaterThan(MaxAmount):
		return invalid(CodeInvalidAmount, field, "%s is above 10^12", d)
	case !d.Equal(d.Truncate(MaxScale)):
		return invalid(CodeInvalidAmount, field, "%s has more than 6 fractional digits", d)
	}
	return nil
}

// isNameByte reports whether c may appear in a limit name or a meta key.
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// CheckName refuses a limit name that is not [a-z0-9][a-z0-9._-]{0,63}
// (invalid_name, naming field).
func CheckName(field, name string) error {
	ok := len(name) > 0 && len(name) <= 64 && name[0] != '.' && name[0] != '_' && name[0] != '-'
	for i := 0; ok && i < len(name); i++ {
		ok = isNameByte(name[i])
	}
	if !ok {
		return invalid(CodeInvalidName, field, "limit names are 1-64 characters of [a-z0-9._-] starting with a letter or digit, not %q", name)
	}
	return nil
}

// CheckKey refuses a bucket key budgetd would refuse: empty, longer than
// MaxKeyBytes, not UTF-8, or with a control character (invalid_key).
func CheckKey(field, key string) error {
	switch {
	case key == "":
		return invalid(CodeInvalidKey, field, "key is empty")
	case len(key) > MaxKeyBytes:
		return invalid(CodeInvalidKey, field, "key is %d bytes; at most %d are allowed", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return invalid(CodeInvalidKey, field, "key is not valid UTF-8")
	}
	for _, r := range key {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return invalid(CodeInvalidKey, field, "key contains the control character U+%04X", r)
		}
	}
	return nil
}

// Validate refuses a Meta budgetd would refuse, naming field ("meta",
// "items[2].meta") or the entry at fault ("meta.order"): too many entries,
// a malformed key, a value too long, not UTF-8 or with a control character
// other than tab, line feed and carriage return, too many bytes in all.
func (m Meta) Validate(field string) error {
	if len(m) > MaxMetaEntries {
		return invalid(CodeInvalidRequest, field, "has %d entries; at most %d are allowed", len(m), MaxMetaEntries)
	}
	total := 0
	for k, v := range m {
		ok := len(k) > 0 && len(k) <= 64
		for i := 0; ok && i < len(k); i++ {
			ok = isNameByte(k[i])
		}
		switch {
		case !ok:
			return invalid(CodeInvalidRequest, field, "key %q is not 1-64 characters of [a-z0-9_.-]", k)
		case len(v) > MaxMetaValueBytes:
			return invalid(CodeInvalidRequest, field+"."+k, "is %d bytes; at most %d are allowed", len(v), MaxMetaValueBytes)
		case !utf8.ValidString(v):
			return invalid(CodeInvalidRequest, field+"."+k, "is not valid UTF-8")
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f {
				return invalid(CodeInvalidRequest, field+"."+k, "contains the control character U+%04X; only tab, line feed and carriage return are allowed", c)
			}
		}
		total += len(k) + len(v)
	}
	if total > MaxMetaBytes {
		return invalid(CodeInvalidRequest, field, "keys and values come to %d bytes; at most %d are allowed", total, MaxMetaBytes)
	}
	return nil
}

// Bounds of a rolling window.
const (
	// MinWindow and MaxWindow bound a window's length.
	MinWindow = time.Second
	MaxWindow = 8760 * time.Hour
	// MaxWindowSlots is the most slots a window's precision may cut it into.
	MaxWindowSlots = 1000
	// minDefaultSlots is the fewest slots a default precision gives.
	minDefaultSlots = 60
)

// precisionLadder is where a window's default precision is taken from,
// largest first.
var precisionLadder = []time.Duration{
	24 * time.Hour, time.Hour, 10 * time.Minute, time.Minute, 10 * time.Second,
	time.Second, 100 * time.Millisecond, 10 * time.Millisecond, time.Millisecond,
}

// DefaultPrecision returns the precision budgetd gives a window of length
// when none is given: the largest of 24h, 1h, 10m, 1m, 10s, 1s, 100ms, 10ms
// and 1ms that divides it into at least 60 slots (1m → 1s, 720h → 1h,
// 8760h → 24h), and false when none does within MaxWindowSlots, in which
// case the precision must be given.
func DefaultPrecision(length time.Duration) (time.Duration, bool) {
	for _, p := range precisionLadder {
		if length%p == 0 && length/p >= minDefaultSlots && length/p <= MaxWindowSlots {
			return p, true
		}
	}
	return 0, false
}

// Validate refuses a limit body budgetd would refuse for its shape: a
// capacity or leak amount out of range, not exactly one of leak, period and
// window, a leak interval out of range or not whole microseconds, an unknown
// period length, a start day out of range or given where none is allowed, a
// window's length out of range or a precision that does not divide it into
// at most 1000 slots, an unknown mode, a grace without soft mode or out of
// range. The time zone is checked by budgetd, against its own
// zone database.
func (p LimitPut) Validate() error {
	if err := CheckAmount("capacity", p.Capacity, true); err != nil {
		return err
	}
	if err := p.validateMode(); err != nil {
		return err
	}
	if err := validateThresholds(p.Thresholds); err != nil {
		return err
	}
	switch {
	case p.Window != nil && (p.Leak != nil || p.Period != nil):
		return invalid(CodeInvalidRequest, "window", "a limit has one of leak (a rate), period (a calendar budget) or window (a rolling window), not several")
	case p.Leak != nil && p.Period != nil:
		return invalid(CodeInvalidRequest, "leak", "a limit has one of leak (a rate), period (a calendar budget) or window (a rolling window), not several")
	case p.Leak == nil && p.Period == nil && p.Window == nil:
		return invalid(CodeInvalidRequest, "leak", "a limit needs leak (a rate), period (a calendar budget) or window (a rolling window)")
	case p.Window != nil:
		return p.Window.validate()
	case p.Leak != nil:
		if err := CheckAmount("leak.amount", p.Leak.Amount, true); err != nil {
			return err
		}
		per := time.Duration(p.Leak.Per)
		if per < time.Microsecond || per > MaxPer || per%time.Microsecond != 0 {
			return invalid(CodeInvalidDuration, "leak.per", "%s is not whole microseconds from 1µs to 87600h", per)
		}
		return nil
	}
	sd := p.Period.StartDay
	switch p.Period.Every {
	case Day, Year:
		if sd != nil {
			return invalid(CodeInvalidRequest, "period.start_day", "start_day is not allowed for %s periods", p.Period.Every)
		}
	case Week:
		if sd != nil && (*sd < 1 || *sd > 7) {
			return invalid(CodeInvalidRequest, "period.start_day", "start_day of a week is an ISO weekday from 1 (Monday) to 7 (Sunday), not %d", *sd)
		}
	case Month, Quarter:
		if sd != nil && (*sd < 1 || *sd > 28) {
			return invalid(CodeInvalidRequest, "period.start_day", "start_day of a %s is a day of the month from 1 to 28, not %d", p.Period.Every, *sd)
		}
	default:
		return invalid(CodeInvalidRequest, "period.every", "%q is not one of day, week, month, quarter, year", p.Period.Every)
	}
	return nil
}

// MaxGrace is the largest grace of a soft limit, in percent.
const MaxGrace = 100

// validateMode refuses an unknown mode, and a grace given without soft mode
// or above MaxGrace.
func (p LimitPut) validateMode() error {
	switch p.Mode {
	case "", ModeEnforce, ModeShadow, ModeSoft:
	default:
		return invalid(CodeInvalidRequest, "mode", "%q is not one of enforce, shadow, soft", p.Mode)
	}
	if p.Grace == nil {
		return nil
	}
	if p.Mode != ModeSoft {
		return invalid(CodeInvalidRequest, "grace", "grace is only for a limit in soft mode")
	}
	if p.Grace.Value.Sign() < 0 || p.Grace.Value.GreaterThan(decimal.NewFromInt(MaxGrace)) || !p.Grace.Value.Equal(p.Grace.Value.Truncate(2)) {
		return invalid(CodeInvalidRequest, "grace", "%s is not a percentage from 0%% to %d%% with at most 2 decimals", p.Grace, MaxGrace)
	}
	return nil
}

// MaxThresholds is the most thresholds a limit may list.
const MaxThresholds = 8

// validateThresholds refuses more than MaxThresholds, a threshold that is
// neither a percentage above 0% and at most 200% with at most 2 decimals nor
// an amount above 0, and one listed twice.
func validateThresholds(ts []string) error {
	if len(ts) > MaxThresholds {
		return invalid(CodeInvalidRequest, "thresholds", "a limit has at most %d thresholds, not %d", MaxThresholds, len(ts))
	}
	seen := make([]decimal.Decimal, 0, len(ts))
	pct := make([]bool, 0, len(ts))
	for i, t := range ts {
		field := fmt.Sprintf("thresholds[%d]", i)
		var v decimal.Decimal
		isPct := strings.HasSuffix(t, "%")
		if isPct {
			p, err := ParsePercent(field, t)
			if err != nil || p.Sign() <= 0 || p.GreaterThan(decimal.NewFromInt(200)) {
				return invalid(CodeInvalidRequest, field, "%q is not a percentage above 0%% and at most 200%% with at most 2 decimals", t)
			}
			v = p
		} else {
			a, err := decimal.NewFromString(t)
			if err != nil || !plainDecimal(t) || CheckAmount(field, a, true) != nil {
				return invalid(CodeInvalidRequest, field, "%q is neither a percentage like \"80%%\" nor an amount like \"4500.00\"", t)
			}
			v = a
		}
		for j := range seen {
			if pct[j] == isPct && seen[j].Equal(v) {
				return invalid(CodeInvalidRequest, field, "%s is listed twice", t)
			}
		}
		seen, pct = append(seen, v), append(pct, isPct)
	}
	return nil
}

// plainDecimal says whether s is digits with an optional '.' and digits.
func plainDecimal(s string) bool {
	intPart, frac, dot := strings.Cut(s, ".")
	return intPart != "" && allDigits(intPart) && allDigits(frac) && (!dot || frac != "")
}

// validate refuses a window budgetd would refuse.
func (w WindowPut) validate() error {
	length, precision := time.Duration(w.Length), time.Duration(w.Precision)
	if length < MinWindow || length > MaxWindow || length%time.Microsecond != 0 {
		return invalid(CodeInvalidRequest, "window.length", "%s is not whole microseconds from 1s to 8760h", length)
	}
	if precision == 0 {
		if _, ok := DefaultPrecision(length); !ok {
			return invalid(CodeInvalidRequest, "window.precision", "no default precision divides %s into 60 to %d slots; give one", length, MaxWindowSlots)
		}
		return nil
	}
	if precision < time.Microsecond || precision%time.Microsecond != 0 || precision > length || length%precision != 0 || length/precision > MaxWindowSlots {
		return invalid(CodeInvalidRequest, "window.precision", "%s does not divide %s into at most %d slots of whole microseconds", precision, length, MaxWindowSlots)
	}
	return nil
}
