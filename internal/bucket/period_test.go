package bucket

import (
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/calendar"
	"github.com/shopspring/decimal"
)

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func period(t *testing.T, every calendar.Unit, zone string, startDay int) *calendar.Period {
	t.Helper()
	loc, err := calendar.LoadZone(zone)
	if err != nil {
		t.Fatal(err)
	}
	return &calendar.Period{Every: every, Zone: loc, StartDay: startDay}
}

// TestPeriodBoundaries charges a full periodic bucket inside a period and
// checks, with boundaries written out by hand in UTC: the period's bounds in
// the decision, a denial one microsecond before the reset whose retry_after
// is that microsecond, and a full capacity at the reset.
func TestPeriodBoundaries(t *testing.T) {
	cases := []struct {
		name       string
		every      calendar.Unit
		zone       string
		startDay   int
		charge     string
		start, end string
	}{
		{"month of 28 days", calendar.Month, "UTC", 1, "2027-02-14T12:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"},
		{"month of 29 days (leap year)", calendar.Month, "UTC", 1, "2028-02-29T10:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"month of 30 days", calendar.Month, "UTC", 1, "2026-04-30T23:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"},
		{"month of 31 days", calendar.Month, "UTC", 1, "2026-01-31T23:59:59Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
		{"start_day 28 across February", calendar.Month, "UTC", 28, "2026-03-01T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-28T00:00:00Z"},
		{"start_day 28 before it", calendar.Month, "UTC", 28, "2026-02-27T23:00:00Z", "2026-01-28T00:00:00Z", "2026-02-28T00:00:00Z"},
		{"week across a year end", calendar.Week, "UTC", 1, "2027-01-02T12:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z"},
		{"week from Sunday across a year end", calendar.Week, "UTC", 7, "2027-01-01T00:00:00Z", "2026-12-27T00:00:00Z", "2027-01-03T00:00:00Z"},
		{"quarter", calendar.Quarter, "UTC", 1, "2026-05-15T00:00:00Z", "2026-04-01T00:00:00Z", "2026-07-01T00:00:00Z"},
		{"quarter from the 15th", calendar.Quarter, "UTC", 15, "2026-01-10T00:00:00Z", "2025-10-15T00:00:00Z", "2026-01-15T00:00:00Z"},
		{"quarter in Berlin across a year end and DST", calendar.Quarter, "Europe/Berlin", 1, "2026-12-31T23:30:00Z", "2026-12-31T23:00:00Z", "2027-03-31T22:00:00Z"},
		{"month in Berlin (CET to CEST)", calendar.Month, "Europe/Berlin", 1, "2026-03-15T00:00:00Z", "2026-02-28T23:00:00Z", "2026-03-31T22:00:00Z"},
		{"Berlin day of 23 hours", calendar.Day, "Europe/Berlin", 0, "2026-03-29T12:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		{"Berlin day of 25 hours", calendar.Day, "Europe/Berlin", 0, "2026-10-25T12:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"},
		{"New York day of 23 hours", calendar.Day, "America/New_York", 0, "2026-03-08T12:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"},
		{"New York day of 25 hours", calendar.Day, "America/New_York", 0, "2026-11-01T12:00:00Z", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"},
		{"Santiago day before a skipped midnight", calendar.Day, "America/Santiago", 0, "2026-09-05T12:00:00Z", "2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z"},
		{"Santiago day that starts at 01:00", calendar.Day, "America/Santiago", 0, "2026-09-06T12:00:00Z", "2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"},
		{"Kolkata day (half-hour offset)", calendar.Day, "Asia/Kolkata", 0, "2026-06-15T12:00:00Z", "2026-06-14T18:30:00Z", "2026-06-15T18:30:00Z"},
		{"Kolkata month", calendar.Month, "Asia/Kolkata", 1, "2026-06-30T19:00:00Z", "2026-06-30T18:30:00Z", "2026-07-31T18:30:00Z"},
		{"Kiritimati year (UTC+14)", calendar.Year, "Pacific/Kiritimati", 0, "2026-12-31T10:00:00Z", "2026-12-31T10:00:00Z", "2027-12-31T10:00:00Z"},
		{"year of a leap year", calendar.Year, "UTC", 0, "2028-06-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := Limit{Capacity: d("100"), Period: period(t, tc.every, tc.zone, tc.startDay)}
			start, end := at(t, tc.start), at(t, tc.end)
			dec, s := Fillup(l, State{}, at(t, tc.charge), d("100"))
			if !dec.Accepted || !dec.Level.Equal(d("100")) || !dec.PeriodStart.Equal(start) || !dec.ResetsAt.Equal(end) {
				t.Fatalf("fill: %+v, want accepted at level 100 in [%s, %s)", dec, start, end)
			}
			last := end.Add(-time.Microsecond)
			dec = CanAccept(l, s, last, d("1"))
			if dec.Accepted || !dec.Level.Equal(d("100")) || dec.RetryAfter != sec("0.000001") || !dec.ResetsAt.Equal(end) {
				t.Fatalf("one microsecond before the reset: %+v", dec)
			}
			dec, s = Fillup(l, s, end, d("100"))
			if !dec.Accepted || !dec.Level.Equal(d("100")) || !dec.PeriodStart.Equal(end) || !dec.ResetsAt.After(end) {
				t.Fatalf("at the reset: %+v", dec)
			}
			if lvl := LevelAt(l, s, end.Add(-time.Microsecond)); !lvl.Equal(d("100")) {
				t.Fatalf("a write in the next period read from the clock a microsecond behind: level %s, want 100 (never credit)", lvl)
			}
		})
	}
}

// TestPeriodSteps walks periodic buckets through tables of operations.
func TestPeriodSteps(t *testing.T) {
	type step struct {
		at       string
		op       string // fill, can, drain, reserve (ttl), commit (the first hold), release
		cost     string
		ttl      time.Duration
		accepted bool
		level    string
		held     string
		retry    string
	}
	tables := []struct {
		name  string
		every calendar.Unit
		zone  string
		steps []step
	}{
		{"holds live across a reset and a commit charges the new period", calendar.Month, "UTC", []step{
			{"2026-01-31T23:00:00Z", "fill", "50", 0, true, "50", "0", "0"},
			{"2026-01-31T23:00:00Z", "reserve", "40", 2 * time.Hour, true, "50", "40", "0"},
			{"2026-01-31T23:00:00Z", "can", "20", 0, false, "50", "40", "3600"},    // fits at the reset
			{"2026-01-31T23:00:00Z", "can", "70", 0, false, "50", "40", "7200"},    // fits when the hold expires
			{"2026-01-31T23:00:00Z", "can", "101", 0, false, "50", "40", "0"},      // never fits
			{"2026-02-01T00:30:00Z", "can", "70", 0, false, "0", "40", "1800"},     // the hold counts in the new period
			{"2026-02-01T00:30:00Z", "commit", "30", 0, true, "30", "0", "0"},      // charged to February
			{"2026-02-01T00:30:00Z", "can", "70", 0, true, "30", "0", "0"},         //
			{"2026-02-01T00:30:00Z", "fill", "71", 0, false, "30", "0", "2417400"}, // to 1 March: 27 days 23.5 h
		}},
		{"a hold that expires before the reset", calendar.Month, "UTC", []step{
			{"2026-01-31T22:00:00Z", "fill", "50", 0, true, "50", "0", "0"},
			{"2026-01-31T22:00:00Z", "reserve", "40", 30 * time.Minute, true, "50", "40", "0"},
			{"2026-01-31T22:00:00Z", "can", "20", 0, false, "50", "40", "1800"},
			{"2026-01-31T22:00:00Z", "can", "60", 0, false, "50", "40", "7200"},
			{"2026-01-31T22:00:00Z", "release", "", 0, true, "50", "0", "0"},
			{"2026-01-31T22:00:00Z", "can", "50", 0, true, "50", "0", "0"},
		}},
		{"drains never go below zero nor reach into a past period", calendar.Day, "Europe/Berlin", []step{
			{"2026-03-28T22:00:00Z", "fill", "80", 0, true, "80", "0", "0"},
			{"2026-03-28T22:00:00Z", "drain", "30", 0, true, "50", "0", "0"},
			{"2026-03-28T22:59:59.999999Z", "can", "51", 0, false, "50", "0", "0.000001"},
			{"2026-03-28T23:00:00Z", "drain", "30", 0, true, "0", "0", "0"},   // the day ended: nothing to drain
			{"2026-03-28T23:00:00Z", "fill", "100", 0, true, "100", "0", "0"}, // a 23-hour day starts
			{"2026-03-29T21:00:00Z", "drain", "500", 0, true, "0", "0", "0"},  // clamped at zero
			{"2026-03-29T21:00:00Z", "fill", "100", 0, true, "100", "0", "0"},
			{"2026-03-29T21:00:00Z", "can", "1", 0, false, "100", "0", "3600"}, // the day ends at 22:00Z
			{"2026-03-29T20:00:00Z", "can", "1", 0, false, "100", "0", "7200"}, // a clock one hour back: no credit
		}},
		{"a bucket idle for ten years", calendar.Month, "Europe/Berlin", []step{
			{"2016-01-15T12:00:00Z", "fill", "100", 0, true, "100", "0", "0"},
			{"2026-01-15T12:00:00Z", "can", "100", 0, true, "0", "0", "0"},
			{"2026-01-15T12:00:00Z", "fill", "60", 0, true, "60", "0", "0"},
		}},
	}
	for _, tb := range tables {
		t.Run(tb.name, func(t *testing.T) {
			l := Limit{Capacity: d("100"), Period: period(t, tb.every, tb.zone, 1)}
			var s State
			for i, st := range tb.steps {
				now := at(t, st.at)
				var dec Decision
				switch st.op {
				case "fill":
					dec, s = Fillup(l, s, now, d(st.cost))
				case "can":
					dec = CanAccept(l, s, now, d(st.cost))
				case "reserve":
					dec, s = Reserve(l, s, now, d(st.cost), now.Add(st.ttl))
				case "commit", "release":
					charge := Amount{}
					if st.op == "commit" {
						charge = d(st.cost)
					}
					s = Resolve(l, s, now, 0, charge)
					dec = CanAccept(l, s, now, Amount{})
				case "drain":
					_, s = Drain(l, s, now, d(st.cost))
					dec = CanAccept(l, s, now, Amount{})
				}
				if dec.Accepted != st.accepted || !dec.Level.Equal(d(st.level)) || !dec.Held.Equal(d(st.held)) || dec.RetryAfter != sec(st.retry) {
					t.Fatalf("step %d %s %s at %s: accepted=%v level=%s held=%s retry=%s, want %v %s %s %s",
						i, st.op, st.cost, st.at, dec.Accepted, dec.Level, dec.Held, dec.RetryAfter, st.accepted, st.level, st.held, st.retry)
				}
				if dec.PeriodStart.IsZero() || dec.PeriodStart.After(now) || !dec.ResetsAt.After(now) {
					t.Fatalf("step %d: period [%s, %s) does not contain %s", i, dec.PeriodStart, dec.ResetsAt, now)
				}
			}
		})
	}
}

// TestPeriodAheadOfClock: a bucket written in a later period than the
// clock reads keeps its level until that later period ends, and retry_after
// waits for that end, never for the end of the clock's period.
func TestPeriodAheadOfClock(t *testing.T) {
	l := Limit{Capacity: d("100"), Period: period(t, calendar.Month, "UTC", 1)}
	s := State{Level: d("100"), Updated: at(t, "2026-02-01T00:00:00.5Z")}
	now := at(t, "2026-01-31T23:59:59Z")
	dec := CanAccept(l, s, now, d("1"))
	if dec.Accepted || !dec.Level.Equal(d("100")) {
		t.Fatalf("%+v: a level written ahead of the clock must count", dec)
	}
	want := at(t, "2026-03-01T00:00:00Z").Sub(now).Seconds()
	if !dec.RetryAfter.Seconds().Equal(decimal.NewFromFloat(want)) {
		t.Fatalf("retry_after %s, want %v (the end of February)", dec.RetryAfter, want)
	}
	if got := CanAccept(l, s, now.Add(time.Duration(want)*time.Second), d("1")); !got.Accepted {
		t.Fatalf("not accepted at retry_after: %+v", got)
	}
}

// TestPeriodRetryAfterIsExact: for random periodic buckets with holds, the
// cost is refused one microsecond before retry_after and accepted at it.
func TestPeriodRetryAfterIsExact(t *testing.T) {
	l := Limit{Capacity: d("100"), Period: period(t, calendar.Day, "America/New_York", 0)}
	base := at(t, "2026-03-07T20:00:00Z")
	for i := range 200 {
		now := base.Add(time.Duration(i) * 17 * time.Minute)
		s := State{Level: d("60"), Updated: now.Add(-time.Duration(i%5) * time.Hour)}
		for j := range i % 4 {
			s.Holds = append(s.Holds, Hold{Amount: d("10"), ExpiresAt: now.Add(time.Duration(j*i+1) * 7 * time.Minute)})
		}
		for _, cost := range []string{"1", "25", "45", "70", "100"} {
			dec := CanAccept(l, s, now, d(cost))
			if dec.Accepted || dec.NeverFits {
				continue
			}
			wait := dec.RetryAfter.Duration()
			if CanAccept(l, s, now.Add(wait-time.Microsecond), d(cost)).Accepted {
				t.Fatalf("case %d cost %s: accepted before retry_after %s", i, cost, dec.RetryAfter)
			}
			if !CanAccept(l, s, now.Add(wait), d(cost)).Accepted {
				t.Fatalf("case %d cost %s: refused at retry_after %s", i, cost, dec.RetryAfter)
			}
		}
	}
}

func BenchmarkCanAcceptPeriodic(b *testing.B) {
	loc, _ := calendar.LoadZone("Europe/Berlin")
	l := Limit{Capacity: d("5000"), Period: &calendar.Period{Every: calendar.Month, Zone: loc, StartDay: 1}}
	s := State{Level: d("1234.5"), Updated: t0}
	now := t0.Add(time.Hour)
	for b.Loop() {
		CanAccept(l, s, now, d("1"))
	}
}

// FuzzPeriodic checks the invariants of the periodic rule on random
// sequences: a level never below zero nor above capacity, never more than
// charged since the period started, accepted iff level + held + cost fits,
// and retry_after exact to the microsecond.
func FuzzPeriodic(f *testing.F) {
	f.Add(uint8(2), uint8(0), int64(0), []byte{10, 200, 3, 77, 255, 1})
	f.Add(uint8(0), uint8(3), int64(86400), []byte{0, 0, 0, 90, 90, 90})
	zones := []string{"UTC", "Europe/Berlin", "America/Santiago", "Asia/Kolkata", "America/New_York"}
	f.Fuzz(func(t *testing.T, unit, zone uint8, offset int64, ops []byte) {
		every := calendar.Unit(unit%5) + calendar.Day
		sd := 1
		if every == calendar.Day || every == calendar.Year {
			sd = 0
		}
		l := Limit{Capacity: d("100"), Period: period(t, every, zones[int(zone)%len(zones)], sd)}
		now := time.Date(2026, 3, 28, 20, 0, 0, 0, time.UTC).Add(time.Duration(offset%(400*86400)) * time.Second)
		var s State
		for i := 0; i+1 < len(ops); i += 2 {
			now = now.Add(time.Duration(ops[i]) * 17 * time.Minute)
			cost := dd(decimal.NewFromInt(int64(ops[i+1] % 120)))
			if ops[i+1]%7 == 0 {
				_, s = Reserve(l, s, now, dd(decimal.NewFromInt(int64(ops[i+1]%30)+1)), now.Add(time.Duration(ops[i])*time.Minute+time.Second))
				continue
			}
			before := CanAccept(l, s, now, cost)
			start, end := l.Period.Bounds(now)
			if !before.PeriodStart.Equal(start) || !before.ResetsAt.Equal(end) {
				t.Fatalf("bounds %s %s, want %s %s", before.PeriodStart, before.ResetsAt, start, end)
			}
			fits := before.Level.Add(before.Held).Add(cost).LessThanOrEqual(l.Capacity)
			if before.Accepted != (fits || cost.IsZero()) || before.Level.Sign() < 0 {
				t.Fatalf("decision %+v for cost %s", before, cost)
			}
			if !before.Accepted && !before.NeverFits {
				wait := before.RetryAfter.Duration()
				if wait <= 0 || CanAccept(l, s, now.Add(wait-time.Microsecond), cost).Accepted || !CanAccept(l, s, now.Add(wait), cost).Accepted {
					t.Fatalf("retry_after %s for cost %s is not exact: %+v", before.RetryAfter, cost, before)
				}
			}
			var dec Decision
			dec, s = Fillup(l, s, now, cost)
			if dec.Accepted && !dec.Level.Equal(before.Level.Add(cost)) {
				t.Fatalf("level %s after adding %s to %s", dec.Level, cost, before.Level)
			}
			if dec.Level.Add(dec.Held).GreaterThan(l.Capacity) {
				t.Fatalf("over capacity: %+v", dec)
			}
		}
	})
}
