package calendar

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
	if err != nil {
		t.Fatalf("LoadZone(%q): %v", name, err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestLoadZone(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Pacific/Kiritimati", "America/Santiago"} {
		if _, err := LoadZone(name); err != nil {
			t.Errorf("LoadZone(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "Mars/Olympus", "../etc/passwd", "/etc/localtime", "europe/berlin", "Europe/", "Europe",
		strings.Repeat("A", 400), "Local", "Europe/Berlin\x00"} {
		if _, err := LoadZone(name); !errors.Is(err, ErrUnknownZone) {
			t.Errorf("LoadZone(%q) = %v, want ErrUnknownZone", name, err)
		}
	}
}

func TestParseUnit(t *testing.T) {
	for _, u := range []Unit{Day, Week, Month, Quarter, Year} {
		if got, ok := ParseUnit(u.String()); !ok || got != u {
			t.Errorf("ParseUnit(%q) = %v, %v", u.String(), got, ok)
		}
	}
	for _, s := range []string{"", "Month", "months", "hour", "fortnight"} {
		if _, ok := ParseUnit(s); ok {
			t.Errorf("ParseUnit(%q) accepted", s)
		}
	}
}

// TestBounds is the step table: for an instant, the period that holds it.
func TestBounds(t *testing.T) {
	cases := []struct {
		name     string
		every    Unit
		zone     string
		startDay int
		at       string
		start    string
		end      string
	}{
		// Month ends of 31, 30, 28 and 29 days.
		{"jan", Month, "UTC", 1, "2026-01-31T23:59:59.999999Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"},
		{"first instant", Month, "UTC", 1, "2026-02-01T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"},
		{"april", Month, "UTC", 1, "2026-04-15T12:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"},
		{"leap feb", Month, "UTC", 1, "2028-02-29T12:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"start day 28 in feb", Month, "UTC", 28, "2027-03-01T00:00:00Z", "2027-02-28T00:00:00Z", "2027-03-28T00:00:00Z"},
		{"start day 28 before it", Month, "UTC", 28, "2027-03-27T23:59:59Z", "2027-02-28T00:00:00Z", "2027-03-28T00:00:00Z"},
		{"start day 28 across year", Month, "UTC", 28, "2027-01-10T00:00:00Z", "2026-12-28T00:00:00Z", "2027-01-28T00:00:00Z"},
		// Berlin: 00:00 local is 23:00 UTC in winter, 22:00 in summer.
		{"berlin month", Month, "Europe/Berlin", 1, "2026-11-23T18:00:00Z", "2026-10-31T23:00:00Z", "2026-11-30T23:00:00Z"},
		{"berlin before local midnight", Month, "Europe/Berlin", 1, "2026-11-30T22:59:59.999999Z", "2026-10-31T23:00:00Z", "2026-11-30T23:00:00Z"},
		{"berlin march has 743 hours", Month, "Europe/Berlin", 1, "2026-03-15T00:00:00Z", "2026-02-28T23:00:00Z", "2026-03-31T22:00:00Z"},
		{"berlin spring-forward day is 23h", Day, "Europe/Berlin", 0, "2026-03-29T12:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"},
		{"berlin fall-back day is 25h", Day, "Europe/Berlin", 0, "2026-10-25T12:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"},
		{"new york fall-back day", Day, "America/New_York", 0, "2026-11-01T12:00:00Z", "2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"},
		{"new york spring-forward day", Day, "America/New_York", 0, "2026-03-08T12:00:00Z", "2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"},
		// Santiago skipped midnight on 2022-09-11 (00:00 -04 became 01:00 -03).
		{"santiago skipped midnight", Day, "America/Santiago", 0, "2022-09-11T12:00:00Z", "2022-09-11T04:00:00Z", "2022-09-12T03:00:00Z"},
		{"santiago day before", Day, "America/Santiago", 0, "2022-09-11T03:59:59Z", "2022-09-10T04:00:00Z", "2022-09-11T04:00:00Z"},
		{"santiago month", Month, "America/Santiago", 11, "2022-09-20T00:00:00Z", "2022-09-11T04:00:00Z", "2022-10-11T03:00:00Z"},
		// Beirut moved its clocks at midnight: 2022-03-27 00:00 +02 became 01:00 +03.
		{"beirut skipped midnight", Day, "Asia/Beirut", 0, "2022-03-27T10:00:00Z", "2022-03-26T22:00:00Z", "2022-03-27T21:00:00Z"},
		// Apia skipped the whole of 30 December 2011.
		{"apia skipped day", Day, "Pacific/Apia", 0, "2011-12-30T10:00:00Z", "2011-12-30T10:00:00Z", "2011-12-31T10:00:00Z"},
		{"apia day before the skip", Day, "Pacific/Apia", 0, "2011-12-30T09:59:59Z", "2011-12-29T10:00:00Z", "2011-12-30T10:00:00Z"},
		// Far east and half-hour zones.
		{"kiritimati", Day, "Pacific/Kiritimati", 0, "2026-06-30T09:59:59Z", "2026-06-29T10:00:00Z", "2026-06-30T10:00:00Z"},
		{"kolkata month", Month, "Asia/Kolkata", 1, "2026-06-30T18:29:59.999999Z", "2026-05-31T18:30:00Z", "2026-06-30T18:30:00Z"},
		{"kolkata next month", Month, "Asia/Kolkata", 1, "2026-06-30T18:30:00Z", "2026-06-30T18:30:00Z", "2026-07-31T18:30:00Z"},
		{"kathmandu 5:45", Day, "Asia/Kathmandu", 0, "2026-01-01T00:00:00Z", "2025-12-31T18:15:00Z", "2026-01-01T18:15:00Z"},
		// ISO weeks across a year end: 2026-12-31 is a Thursday.
		{"week across year end", Week, "UTC", 1, "2027-01-01T00:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z"},
		{"week from sunday", Week, "UTC", 7, "2027-01-01T00:00:00Z", "2026-12-27T00:00:00Z", "2027-01-03T00:00:00Z"},
		{"week on its start day", Week, "UTC", 4, "2026-12-31T00:00:00Z", "2026-12-31T00:00:00Z", "2027-01-07T00:00:00Z"},
		{"week in new york across dst", Week, "America/New_York", 1, "2026-11-02T04:59:59Z", "2026-10-26T04:00:00Z", "2026-11-02T05:00:00Z"},
		// Quarters.
		{"q4", Quarter, "UTC", 1, "2026-11-23T00:00:00Z", "2026-10-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"q1", Quarter, "UTC", 1, "2027-03-31T23:59:59Z", "2027-01-01T00:00:00Z", "2027-04-01T00:00:00Z"},
		{"quarter start day 15, before it", Quarter, "UTC", 15, "2026-10-14T00:00:00Z", "2026-07-15T00:00:00Z", "2026-10-15T00:00:00Z"},
		{"quarter start day 15, in 2nd month", Quarter, "UTC", 15, "2026-11-01T00:00:00Z", "2026-10-15T00:00:00Z", "2027-01-15T00:00:00Z"},
		{"quarter berlin", Quarter, "Europe/Berlin", 1, "2026-05-01T00:00:00Z", "2026-03-31T22:00:00Z", "2026-06-30T22:00:00Z"},
		// Years.
		{"year", Year, "UTC", 0, "2028-12-31T23:59:59.999999Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"},
		{"year berlin", Year, "Europe/Berlin", 0, "2026-12-31T23:00:00Z", "2026-12-31T23:00:00Z", "2027-12-31T23:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Period{Every: c.every, Zone: mustZone(t, c.zone), StartDay: c.startDay}
			start, end := p.Bounds(utc(c.at))
			if !start.Equal(utc(c.start)) || !end.Equal(utc(c.end)) {
				t.Errorf("Bounds(%s) = [%s, %s), want [%s, %s)", c.at, start.UTC().Format(time.RFC3339Nano), end.UTC().Format(time.RFC3339Nano), c.start, c.end)
			}
		})
	}
}

// TestBoundsProperties checks, hour by hour over years in zones with odd
// rules, that every instant lies in its period, that periods tile time, and
// that each starts at local midnight unless a clock change skipped it.
func TestBoundsProperties(t *testing.T) {
	zonesUnderTest := []string{"UTC", "Europe/Berlin", "America/New_York", "America/Santiago", "Asia/Beirut", "Pacific/Apia", "Asia/Kolkata", "Australia/Lord_Howe", "America/St_Johns"}
	for _, z := range zonesUnderTest {
		loc := mustZone(t, z)
		for _, p := range []Period{{Day, loc, 0}, {Week, loc, 3}, {Month, loc, 28}, {Quarter, loc, 1}, {Year, loc, 0}} {
			from := utc("2010-06-01T00:00:00Z")
			to := from.AddDate(2, 0, 0)
			if testing.Short() {
				to = from.AddDate(1, 0, 0)
			}
			var prevEnd time.Time
			for at := from; at.Before(to); at = at.Add(11*time.Hour + 17*time.Minute) {
				start, end := p.Bounds(at)
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%s %v: %s not in [%s, %s)", z, p.Every, at, start, end)
				}
				if s2, _ := p.Bounds(start); !s2.Equal(start) {
					t.Fatalf("%s %v: the period of its own start %s is %s", z, p.Every, start, s2)
				}
				if !prevEnd.IsZero() && start.Before(prevEnd) && !start.Equal(prevEnd) {
					if s, _ := p.Bounds(prevEnd.Add(-time.Microsecond)); !s.Equal(start) {
						t.Fatalf("%s %v: periods overlap at %s", z, p.Every, start)
					}
				}
				prevEnd = end
				l := start.In(loc)
				if l.Hour() != 0 || l.Minute() != 0 || l.Second() != 0 {
					// Only a clock change may move a start off midnight: the
					// instant before must be on the previous local day.
					before := start.Add(-time.Second).In(loc)
					if before.Day() == l.Day() {
						t.Fatalf("%s %v: start %s is not at local midnight (%s)", z, p.Every, start, l)
					}
				}
			}
		}
	}
}

func TestStarts(t *testing.T) {
	p := Period{Every: Month, Zone: mustZone(t, "Europe/Berlin"), StartDay: 1}
	got := p.Starts(utc("2026-11-23T18:00:00Z"), 3)
	want := []string{"2026-10-31T23:00:00Z", "2026-11-30T23:00:00Z", "2026-12-31T23:00:00Z"}
	for i := range want {
		if !got[i].Equal(utc(want[i])) {
			t.Errorf("Starts[%d] = %s, want %s", i, got[i].UTC(), want[i])
		}
	}
	// Apia's skipped day is left out: starts stay strictly increasing.
	a := Period{Every: Day, Zone: mustZone(t, "Pacific/Apia")}
	s := a.Starts(utc("2011-12-29T12:00:00Z"), 4)
	for i := 1; i < len(s); i++ {
		if !s[i].After(s[i-1]) {
			t.Fatalf("Starts not increasing: %v", s)
		}
	}
}

func BenchmarkBounds(b *testing.B) {
	p := Period{Every: Month, Zone: mustZone(&testing.T{}, "Europe/Berlin"), StartDay: 1}
	at := utc("2026-11-23T18:00:00Z")
	for b.Loop() {
		p.Bounds(at)
	}
}

// TestBoundsCache: the remembered periods give exactly what the calendar
// walk gives, for rules that share cache slots and instants that jump back
// and forth across boundaries and DST changes, from many goroutines.
func TestBoundsCache(t *testing.T) {
	var rules []Period
	for _, z := range []string{"UTC", "Europe/Berlin", "America/Santiago", "Asia/Kolkata", "Pacific/Apia"} {
		loc, err := LoadZone(z)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range []string{"day", "week", "month", "quarter", "year"} {
			every, _ := ParseUnit(u)
			p := Period{Every: every, Zone: loc}
			if u == "week" || u == "month" || u == "quarter" {
				p.StartDay = 1
			}
			rules = append(rules, p)
		}
	}
	base := time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for range 20_000 {
				p := rules[r.IntN(len(rules))]
				at := base.Add(time.Duration(r.Int64N(int64(400 * 24 * time.Hour))))
				if r.IntN(3) == 0 {
					at = base.Add(time.Duration(r.Int64N(int64(72 * time.Hour))))
				}
				s1, e1 := p.Bounds(at)
				s2, e2 := p.bounds(at)
				if !s1.Equal(s2) || !e1.Equal(e2) {
					t.Errorf("%v at %s: cached [%s, %s), walked [%s, %s)", p, at, s1, e1, s2, e2)
					return
				}
			}
		})
	}
	wg.Wait()
}
