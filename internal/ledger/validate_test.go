package ledger

import (
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func TestParseAmount(t *testing.T) {
	ok := map[string]string{
		"0": "0", "12": "12", "12.37": "12.37", "0.000001": "0.000001",
		"1000000000000": "1000000000000", "999999999999.999999": "999999999999.999999",
		"1.000000": "1", "5000.00": "5000",
	}
	for in, want := range ok {
		got, err := ParseAmount("cost", in)
		if err != nil || !got.Equal(decimal.RequireFromString(want)) {
			t.Errorf("ParseAmount(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	bad := []string{
		"", " ", "-1", "-0", "+5", ".5", "5.", "007", "00", "1e2", "1E2", "1.0000000", "0.0000001",
		"1000000000000.000001", "1000000000001", "NaN", "Infinity", "-Infinity", "inf", " 5", "5 ",
		"1e1000000", "0x10", "1_000", "１", "12.37.1", strings.Repeat("9", 400), "1,5",
	}
	for _, in := range bad {
		_, err := ParseAmount("cost", in)
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Code != "invalid_amount" || ie.Field != "cost" {
			t.Errorf("ParseAmount(%q) = %v; want invalid_amount naming cost", in, err)
		}
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"u1", "tenant/42", "ключ", strings.Repeat("a", 256), "{team}:user", "a b"} {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", strings.Repeat("a", 257), "a\x00b", "a\nb", "a\x7fb", "a\u0085b", "a\u009fb", "\xff"} {
		if err := ValidateKey(k); err == nil {
			t.Errorf("ValidateKey(%q) accepted", k)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, n := range []string{"a", "user-rows", "spend.team_a", "0", strings.Repeat("a", 64)} {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
	for _, n := range []string{"", "-a", ".a", "A", "a/b", "a b", strings.Repeat("a", 65), "é"} {
		if err := ValidateName(n); err == nil {
			t.Errorf("ValidateName(%q) accepted", n)
		}
	}
}

func TestParseDuration(t *testing.T) {
	if d, err := ParseDuration("per", "720h", time.Microsecond, MaxPer); err != nil || d != 720*time.Hour {
		t.Errorf("720h: %v %v", d, err)
	}
	for _, s := range []string{"", "1", "1ns", "1.5us", "-1s", "87601h", "abc", "1e3s"} {
		if _, err := ParseDuration("per", s, time.Microsecond, MaxPer); err == nil {
			t.Errorf("ParseDuration(%q) accepted", s)
		}
	}
}

// FuzzParseAmount: whatever the input, parsing is bounded, never panics, and
// an accepted amount prints back to a value equal to the input.
func FuzzParseAmount(f *testing.F) {
	for _, s := range []string{"0", "12.37", "1e2", "-1", "1000000000000", "0.0000001", "NaN", "١٢"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseAmount("cost", s)
		if err != nil {
			return
		}
		if d.Sign() < 0 || d.GreaterThan(MaxAmount) || d.Exponent() < -AmountScale {
			t.Fatalf("ParseAmount(%q) accepted %s", s, d)
		}
		if !decimal.RequireFromString(s).Equal(d) || !refAmountRE.MatchString(s) {
			t.Fatalf("ParseAmount(%q) = %s", s, d)
		}
	})
}

func TestValidatePeriod(t *testing.T) {
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	ok := []struct {
		every string
		tz    *string
		day   *int
		want  Period
	}{
		{"month", nil, nil, Period{"month", "UTC", 1}},
		{"month", str("Europe/Berlin"), num(28), Period{"month", "Europe/Berlin", 28}},
		{"quarter", str("Asia/Kolkata"), nil, Period{"quarter", "Asia/Kolkata", 1}},
		{"week", nil, num(7), Period{"week", "UTC", 7}},
		{"week", nil, nil, Period{"week", "UTC", 1}},
		{"day", str("America/Santiago"), nil, Period{"day", "America/Santiago", 0}},
		{"year", nil, nil, Period{"year", "UTC", 0}},
	}
	for _, tc := range ok {
		got, err := ValidatePeriod(tc.every, tc.tz, tc.day)
		if err != nil || got != tc.want {
			t.Errorf("ValidatePeriod(%q, %v, %v) = %+v, %v; want %+v", tc.every, tc.tz, tc.day, got, err, tc.want)
		}
		if _, err := got.Calendar(); err != nil {
			t.Errorf("%+v.Calendar(): %v", got, err)
		}
	}
	bad := []struct {
		every string
		tz    *string
		day   *int
		field string
	}{
		{"", nil, nil, "period.every"},
		{"fortnight", nil, nil, "period.every"},
		{"MONTH", nil, nil, "period.every"},
		{"month", str(""), nil, "period.tz"},
		{"month", str("Mars/Olympus"), nil, "period.tz"},
		{"month", str("../etc/passwd"), nil, "period.tz"},
		{"month", str("/etc/localtime"), nil, "period.tz"},
		{"month", str("Europe/"), nil, "period.tz"},
		{"month", str("europe/berlin"), nil, "period.tz"},
		{"month", str(strings.Repeat("A", 400)), nil, "period.tz"},
		{"month", nil, num(0), "period.start_day"},
		{"month", nil, num(29), "period.start_day"},
		{"quarter", nil, num(-1), "period.start_day"},
		{"week", nil, num(0), "period.start_day"},
		{"week", nil, num(8), "period.start_day"},
		{"day", nil, num(1), "period.start_day"},
		{"year", nil, num(1), "period.start_day"},
	}
	for _, tc := range bad {
		_, err := ValidatePeriod(tc.every, tc.tz, tc.day)
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Code != "invalid_request" || ie.Field != tc.field {
			t.Errorf("ValidatePeriod(%q, %v, %v) = %v; want invalid_request naming %s", tc.every, tc.tz, tc.day, err, tc.field)
		}
	}
}

// The scanners against the regular expressions they replaced, which stay
// here as the reference grammar.
var (
	refNameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	refAmountRE  = regexp.MustCompile(`^(0|[1-9][0-9]*)(\.[0-9]{1,6})?$`)
	refHoldIDRE  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	refMetaKeyRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)
)

func TestScannersMatchGrammar(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	alphabet := "0123456789.-_aZz@ \x00\xff"
	seeds := []string{"", "0", "00", "01", "1.", ".5", "1.0000000", "1.000000", "1000000000000", "1000000000000.000001",
		"99999999999999", "a", "-a", ".a", "_a", "a-b.c_d", strings.Repeat("a", 64), strings.Repeat("a", 65),
		strings.Repeat("A", 128), strings.Repeat("A", 129), "h_-9"}
	for i := range 200_000 {
		var s string
		if i < len(seeds) {
			s = seeds[i]
		} else {
			n := r.IntN(20)
			if r.IntN(10) == 0 {
				n = 60 + r.IntN(80)
			}
			b := make([]byte, n)
			for j := range b {
				b[j] = alphabet[r.IntN(len(alphabet))]
			}
			s = string(b)
		}
		if validName(s) != refNameRE.MatchString(s) {
			t.Fatalf("validName(%q) = %v", s, validName(s))
		}
		if validHoldID(s) != refHoldIDRE.MatchString(s) {
			t.Fatalf("validHoldID(%q) = %v", s, validHoldID(s))
		}
		if validMetaKey(s) != refMetaKeyRE.MatchString(s) {
			t.Fatalf("validMetaKey(%q) = %v", s, validMetaKey(s))
		}
		d, err := ParseAmount("cost", s)
		want := len(s) <= 32 && refAmountRE.MatchString(s)
		if want {
			if w := decimal.RequireFromString(s); w.GreaterThan(MaxAmount) {
				if err == nil {
					t.Fatalf("ParseAmount(%q) took an amount above the maximum", s)
				}
			} else if err != nil || !d.Equal(w) || d.String() != w.String() {
				t.Fatalf("ParseAmount(%q) = %s, %v", s, d, err)
			}
		} else if err == nil {
			t.Fatalf("ParseAmount(%q) = %s, want refused", s, d)
		}
	}
}
