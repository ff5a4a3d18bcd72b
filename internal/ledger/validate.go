package ledger

import (
	"time"
	"unicode/utf8"

	"github.com/budgetd/budgetd/internal/calendar"

	"github.com/shopspring/decimal"
)

// Bounds on input, as documented in docs/rounding.md.
const (
	// AmountScale is the most fractional digits an input amount may carry.
	AmountScale = 6
	// MaxKeyBytes is the longest bucket key, in bytes of UTF-8.
	MaxKeyBytes = 256
	// MaxPer is the longest leak period.
	MaxPer = 87600 * time.Hour
	// MaxItems is the most items in one multi-bucket Fillup.
	MaxItems = 64
	// MaxZoneBytes is the longest time-zone name of a period (the longest
	// IANA name is 32 bytes).
	MaxZoneBytes = 64
)

// MaxAmount is the largest amount accepted on input: 10^12.
var MaxAmount = decimal.New(1, 12)

// The input grammars are checked by the scanners below, a byte at a time,
// rather than by regular expressions: they sit on every request's path.

// isNameByte reports whether c may appear in a limit name or a meta key
// ([a-z0-9._-]).
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// validName reports whether name matches [a-z0-9][a-z0-9._-]{0,63}.
func validName(name string) bool {
	if len(name) == 0 || len(name) > 64 || name[0] == '.' || name[0] == '_' || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return false
		}
	}
	return true
}

// validHoldID reports whether id matches [A-Za-z0-9_-]{1,128}.
func validHoldID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// scanAmount reads s as (0|[1-9][0-9]*)(\.[0-9]{1,6})? of at most 32 bytes
// and returns it as coef × 10^-frac; ok is false for anything else, and big
// is true (with ok) for an integer part of more than 13 digits, which is
// above MaxAmount and would not fit the coefficient.
func scanAmount(s string) (coef int64, frac int, big, ok bool) {
	if len(s) == 0 || len(s) > 32 {
		return 0, 0, false, false
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intDigits := i
	if intDigits == 0 || (intDigits > 1 && s[0] == '0') {
		return 0, 0, false, false
	}
	if i < len(s) {
		if s[i] != '.' {
			return 0, 0, false, false
		}
		frac = len(s) - i - 1
		if frac < 1 || frac > AmountScale {
			return 0, 0, false, false
		}
		for j := i + 1; j < len(s); j++ {
			if s[j] < '0' || s[j] > '9' {
				return 0, 0, false, false
			}
		}
	}
	if intDigits > 13 {
		return 0, 0, true, true
	}
	for j := 0; j < len(s); j++ {
		if s[j] != '.' {
			coef = coef*10 + int64(s[j]-'0')
		}
	}
	return coef, frac, false, true
}

// ValidateName checks a limit name: [a-z0-9][a-z0-9._-]{0,63}.
func ValidateName(name string) error {
	if !validName(name) {
		return invalid(CodeInvalidName, "name", "limit names are 1-64 characters of [a-z0-9._-] starting with a letter or digit")
	}
	return nil
}

// ValidateKey checks a bucket key: 1–256 bytes of valid UTF-8 without control
// characters (C0, DEL, C1). Keys are not normalised.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return invalid(CodeInvalidKey, "key", "key is empty")
	case len(key) > MaxKeyBytes:
		return invalid(CodeInvalidKey, "key", "key is %d bytes; at most %d are allowed", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return invalid(CodeInvalidKey, "key", "key is not valid UTF-8")
	}
	for _, r := range key {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return invalid(CodeInvalidKey, "key", "key contains the control character U+%04X", r)
		}
	}
	return nil
}

// ParseAmount parses a decimal in plain notation, (0|[1-9][0-9]*)(.[0-9]{1,6})?,
// of at most 10^12, naming field in the error. Nothing is rounded: an amount
// that does not fit is refused.
func ParseAmount(field, s string) (decimal.Decimal, error) {
	coef, frac, big, ok := scanAmount(s)
	if !ok {
		return decimal.Decimal{}, invalid(CodeInvalidAmount, field,
			"%q is not a plain decimal with at most 6 fractional digits (like 12 or 12.37)", clip(s))
	}
	var d decimal.Decimal
	if !big {
		d = decimal.New(coef, -int32(frac))
	}
	if big || aboveMax(d) {
		return decimal.Decimal{}, invalid(CodeInvalidAmount, field, "%s is above the maximum 1000000000000", clip(s))
	}
	return d, nil
}

// ParseDuration parses a Go duration that is a whole number of microseconds
// within [min, max], naming field in the error.
func ParseDuration(field, s string, min, max time.Duration) (time.Duration, error) {
	if len(s) > 64 {
		return 0, invalid(CodeInvalidDuration, field, "duration is too long")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid(CodeInvalidDuration, field, "%q is not a Go duration like 1s, 10m or 720h", clip(s))
	}
	if d%time.Microsecond != 0 {
		return 0, invalid(CodeInvalidDuration, field, "%q is not a whole number of microseconds", clip(s))
	}
	if d < min || d > max {
		return 0, invalid(CodeInvalidDuration, field, "%q is outside [%s, %s]", clip(s), min, max)
	}
	return d, nil
}

// ValidatePeriod checks a period as a caller wrote it and returns it with
// its defaults filled in: tz UTC when empty is not given (tzSet false),
// start_day 1 for week, month and quarter when startDay is nil. Errors name
// period.every, period.tz or period.start_day.
func ValidatePeriod(every string, tz *string, startDay *int) (Period, error) {
	u, ok := calendar.ParseUnit(every)
	if !ok {
		return Period{}, invalid(CodeInvalidRequest, "period.every", "%q is not one of day, week, month, quarter, year", clip(every))
	}
	p := Period{Every: u.String(), TZ: "UTC"}
	if tz != nil {
		if *tz == "" {
			return Period{}, invalid(CodeInvalidRequest, "period.tz", "the time zone is empty; omit tz for UTC")
		}
		if len(*tz) > MaxZoneBytes {
			return Period{}, invalid(CodeInvalidRequest, "period.tz", "the time zone name is %d bytes; at most %d are allowed", len(*tz), MaxZoneBytes)
		}
		if _, err := calendar.LoadZone(*tz); err != nil {
			return Period{}, invalid(CodeInvalidRequest, "period.tz", "unknown time zone %q (an IANA name such as Europe/Berlin)", clip(*tz))
		}
		p.TZ = *tz
	}
	switch u {
	case calendar.Day, calendar.Year:
		if startDay != nil {
			return Period{}, invalid(CodeInvalidRequest, "period.start_day", "start_day is not allowed for %s periods", u)
		}
	case calendar.Week:
		p.StartDay = 1
		if startDay != nil {
			if *startDay < 1 || *startDay > 7 {
				return Period{}, invalid(CodeInvalidRequest, "period.start_day", "start_day of a week is an ISO weekday from 1 (Monday) to 7 (Sunday), not %d", *startDay)
			}
			p.StartDay = *startDay
		}
	default:
		p.StartDay = 1
		if startDay != nil {
			if *startDay < 1 || *startDay > 28 {
				return Period{}, invalid(CodeInvalidRequest, "period.start_day", "start_day of a %s is a day of the month from 1 to 28, not %d", u, *startDay)
			}
			p.StartDay = *startDay
		}
	}
	return p, nil
}

// ValidateReservationID reports whether id can name a hold at all. A
// malformed id is reported as ErrReservationNotFound (404), as SPEC asks.
func ValidateReservationID(id string) error {
	if !validHoldID(id) {
		return ErrReservationNotFound
	}
	return nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ValidateWindow checks a window as a caller wrote it (precision 0: not
// given) and returns it with its precision filled in. Errors name
// window.length or window.precision.
func ValidateWindow(length, precision time.Duration) (Window, error) {
	if length < MinWindow || length > MaxWindow {
		return Window{}, invalid(CodeInvalidRequest, "window.length", "the window's length must be from %s to %s, not %s", MinWindow, MaxWindow, length)
	}
	if length%time.Microsecond != 0 {
		return Window{}, invalid(CodeInvalidRequest, "window.length", "the window's length must be a whole number of microseconds")
	}
	if precision == 0 {
		p, ok := DefaultPrecision(length)
		if !ok {
			return Window{}, invalid(CodeInvalidRequest, "window.precision",
				"no default precision divides %s into 60 to %d slots; give a precision that divides it into at most %d", length, MaxWindowSlots, MaxWindowSlots)
		}
		return Window{Length: length, Precision: p}, nil
	}
	if precision < time.Microsecond || precision%time.Microsecond != 0 || precision > length {
		return Window{}, invalid(CodeInvalidRequest, "window.precision", "the precision must be a whole number of microseconds from 1µs to the window's length")
	}
	if length%precision != 0 {
		return Window{}, invalid(CodeInvalidRequest, "window.precision", "the precision %s does not divide the length %s", precision, length)
	}
	if length/precision > MaxWindowSlots {
		return Window{}, invalid(CodeInvalidRequest, "window.precision", "the precision %s cuts %s into %d slots; at most %d are allowed", precision, length, length/precision, MaxWindowSlots)
	}
	return Window{Length: length, Precision: precision}, nil
}

// validateMode refuses a mode that is not one of the three (empty is
// enforce), and a grace that is given without ModeSoft, negative, above
// MaxGrace or with more than 2 decimals.
func validateMode(mode string, grace decimal.Decimal) error {
	switch mode {
	case "", ModeEnforce, ModeShadow, ModeSoft:
	default:
		return invalid(CodeInvalidRequest, "mode", "%q is not one of enforce, shadow, soft", clip(mode))
	}
	if mode != ModeSoft {
		if !grace.IsZero() {
			return invalid(CodeInvalidRequest, "grace", "grace is only for a limit in soft mode")
		}
		return nil
	}
	if grace.Sign() < 0 || grace.GreaterThan(decimal.NewFromInt(MaxGrace)) || !grace.Equal(grace.Truncate(2)) {
		return invalid(CodeInvalidRequest, "grace", "must be a percentage from 0%% to 100%% with at most 2 decimals")
	}
	return nil
}
