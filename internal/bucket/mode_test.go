package bucket

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/calendar"
)

// TestModes walks one bucket of each mode through the same charges: Enforce
// denies what does not fit, Shadow accepts and charges it marked
// ShadowDenied, Soft accepts it up to its ceiling marked OverCapacity and
// then denies with the wait until the ceiling allows it.
func TestModes(t *testing.T) {
	base := Limit{Capacity: d("100"), LeakAmount: d("1"), LeakPer: time.Second}
	shadow, soft := base, base
	shadow.Mode, shadow.Ceiling = Shadow, d("1000000000000000")
	soft.Mode, soft.Ceiling = Soft, d("110") // grace 10%
	type step struct {
		cost             string
		accepted         bool
		level            string
		shadowD, overCap bool
		neverFits        bool
		retry            string
	}
	tests := []struct {
		name  string
		l     Limit
		steps []step
	}{
		{"enforce", base, []step{
			{"90", true, "90", false, false, false, ""},
			{"15", false, "90", false, false, false, "5"},
			{"10", true, "100", false, false, false, ""},
			{"101", false, "100", false, false, true, ""},
		}},
		{"shadow", shadow, []step{
			{"90", true, "90", false, false, false, ""},
			{"15", true, "105", true, false, false, ""},
			{"0", true, "105", false, false, false, ""},
			{"101", true, "206", true, false, false, ""},
		}},
		{"soft", soft, []step{
			{"90", true, "90", false, false, false, ""},
			{"10", true, "100", false, false, false, ""},
			{"7.5", true, "107.5", false, true, false, ""},
			{"3", false, "107.5", false, false, false, "0.5"},
			{"2.5", true, "110", false, true, false, ""},
			{"0", true, "110", false, false, false, ""},
			{"110.000001", false, "110", false, false, true, ""},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s State
			for i, st := range tc.steps {
				cost := d(st.cost)
				probe := CanAccept(tc.l, s, t0, cost)
				dec, ns := Fillup(tc.l, s, t0, cost)
				if dec.Accepted != st.accepted || dec.ShadowDenied != st.shadowD || dec.OverCapacity != st.overCap ||
					dec.NeverFits != st.neverFits || !dec.Level.Equal(d(st.level)) {
					t.Fatalf("step %d (cost %s): %+v, want accepted=%v level=%s shadow_denied=%v over_capacity=%v never_fits=%v",
						i, st.cost, dec, st.accepted, st.level, st.shadowD, st.overCap, st.neverFits)
				}
				if probe.Accepted != dec.Accepted || probe.ShadowDenied != dec.ShadowDenied || probe.OverCapacity != dec.OverCapacity {
					t.Fatalf("step %d: CanAccept %+v disagrees with Fillup %+v", i, probe, dec)
				}
				if st.retry != "" {
					if got := dec.RetryAfter.String(); got != st.retry {
						t.Fatalf("step %d: retry_after %s, want %s", i, got, st.retry)
					}
				}
				if dec.Accepted {
					if ch := Charged(tc.l, ns, t0, cost); ch.ShadowDenied != dec.ShadowDenied || ch.OverCapacity != dec.OverCapacity ||
						!ch.Level.Equal(dec.Level) || !ch.Remaining.Equal(dec.Remaining) {
						t.Fatalf("step %d: Charged %+v, Fillup %+v", i, ch, dec)
					}
					if dec.Level.Cmp(tc.l.Capacity) > 0 && !dec.Remaining.IsZero() {
						t.Fatalf("step %d: remaining %s above capacity", i, dec.Remaining)
					}
				}
				s = ns
			}
		})
	}
}

// TestModeCeilings checks that the ceiling bounds holds, windows and
// periods alike, and that Shadow still stops at its ceiling.
func TestModeCeilings(t *testing.T) {
	soft := Limit{Capacity: d("10"), Mode: Soft, Ceiling: d("12.5"), Window: &Window{Length: 10 * time.Second, Precision: time.Second}}
	dec, s := Reserve(soft, State{}, t0, d("12.5"), t0.Add(time.Minute))
	if !dec.Accepted || !dec.OverCapacity {
		t.Fatalf("soft reserve to the ceiling: %+v", dec)
	}
	if dec, _ := Fillup(soft, s, t0, d("0.000001")); dec.Accepted || dec.RetryAfter.String() != "60" {
		t.Fatalf("soft fillup past the ceiling: %+v, want denied until the hold expires", dec)
	}
	month := calendar.Period{Every: calendar.Month, Zone: time.UTC, StartDay: 1}
	per := Limit{Capacity: d("10"), Mode: Soft, Ceiling: d("11"), Period: &month}
	_, s = Fillup(per, State{}, t0, d("11"))
	dec, _ = Fillup(per, s, t0, d("1"))
	if dec.Accepted || dec.RetryAfter.String() != "2678400" { // 31 days of January
		t.Fatalf("soft period past the ceiling: %+v, want denied until the month ends", dec)
	}
	shadow := Limit{Capacity: d("10"), LeakAmount: d("1"), LeakPer: time.Second, Mode: Shadow, Ceiling: d("1000000000000000")}
	_, s = Fillup(shadow, State{}, t0, d("999999999999999"))
	if dec, _ := Fillup(shadow, s, t0, d("2")); dec.Accepted {
		t.Fatalf("shadow past its ceiling: %+v, want denied", dec)
	}
}
