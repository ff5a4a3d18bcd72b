package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/budgetd/budgetd/api"
)

// TestWireCopiesOfLimits: package api keeps copies of the domain's bounds
// for the wire contract (it is public and imports nothing internal); every
// copy must equal the value here, so a bound changes in one place and this
// test names the copy to change with it.
func TestWireCopiesOfLimits(t *testing.T) {
	ints := []struct {
		name      string
		api, here int64
	}{
		{"MaxScale (ledger.AmountScale)", api.MaxScale, AmountScale},
		{"MaxKeyBytes", api.MaxKeyBytes, MaxKeyBytes},
		{"MaxItems", api.MaxItems, MaxItems},
		{"MaxPer", int64(api.MaxPer), int64(MaxPer)},
		{"MaxMetaEntries", api.MaxMetaEntries, MaxMetaEntries},
		{"MaxMetaValueBytes", api.MaxMetaValueBytes, MaxMetaValueBytes},
		{"MaxMetaBytes", api.MaxMetaBytes, MaxMetaBytes},
		{"MinWindow", int64(api.MinWindow), int64(MinWindow)},
		{"MaxWindow", int64(api.MaxWindow), int64(MaxWindow)},
		{"MaxWindowSlots", api.MaxWindowSlots, MaxWindowSlots},
		{"MaxGrace", api.MaxGrace, MaxGrace},
		{"MaxThresholds", api.MaxThresholds, MaxThresholds},
	}
	for _, c := range ints {
		if c.api != c.here {
			t.Errorf("api.%s = %d, ledger has %d: change the copy in package api with the bound", c.name, c.api, c.here)
		}
	}
	if !api.MaxAmount.Equal(MaxAmount) {
		t.Errorf("api.MaxAmount = %s, ledger.MaxAmount = %s", api.MaxAmount, MaxAmount)
	}
	for _, c := range []struct{ name, api, here string }{
		{"EventThresholdCrossed", api.EventThresholdCrossed, EventThresholdCrossed},
		{"EventThresholdRecovered", api.EventThresholdRecovered, EventThresholdRecovered},
	} {
		if c.api != c.here {
			t.Errorf("api.%s = %q, ledger has %q", c.name, c.api, c.here)
		}
	}
}

// TestWireDefaultPrecision: api.DefaultPrecision (what a client checks
// before sending) gives every window length the precision budgetd gives it.
func TestWireDefaultPrecision(t *testing.T) {
	check := func(length time.Duration) {
		t.Helper()
		p, ok := DefaultPrecision(length)
		ap, aok := api.DefaultPrecision(length)
		if p != ap || ok != aok {
			t.Fatalf("length %s: ledger (%s, %v), api (%s, %v)", length, p, ok, ap, aok)
		}
	}
	for _, p := range precisionLadder {
		for n := time.Duration(1); n <= 2*MaxWindowSlots; n++ {
			check(n * p)
		}
	}
	r := rand.New(rand.NewPCG(42, 42))
	for range 10000 {
		check(MinWindow + time.Duration(r.Int64N(int64(MaxWindow-MinWindow)))/time.Microsecond*time.Microsecond)
	}
}

// TestWirePercent: api.ParsePercent accepts exactly the percentages the
// domain accepts, with the same value.
func TestWirePercent(t *testing.T) {
	for _, s := range []string{"80%", "12.5%", "0.01%", "200%", "999999.99%", "0%", "00%", "007.10%",
		"", "%", "80", "80 %", " 80%", "1.%", ".5%", "1.234%", "1e2%", "-1%", "+1%", "1000000%", "1,5%", "80%%", "٣%"} {
		comparePercent(t, s)
	}
}

// FuzzWirePercent is TestWirePercent on any string.
func FuzzWirePercent(f *testing.F) {
	for _, s := range []string{"80%", "12.5%", "0.01%", "1.%", "1000000%"} {
		f.Add(s)
	}
	f.Fuzz(comparePercent)
}

func comparePercent(t *testing.T, s string) {
	v, ok := parsePercent(s)
	av, err := api.ParsePercent("p", s)
	if ok != (err == nil) || ok && !v.Equal(av) {
		t.Fatalf("%q: ledger (%s, %v), api (%s, %v)", s, v, ok, av, err)
	}
	if w := (api.Percent{Value: av}).String(); ok && fmt.Sprint(v)+"%" != w {
		t.Fatalf("%q: ledger reads %s, api writes %s", s, v, w)
	}
}
