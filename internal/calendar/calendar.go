// Package calendar computes where calendar periods (a day, an ISO week, a
// month, a quarter, a year in an IANA time zone) start and end, with
// budgetd's own copy of the time-zone database, so that every store and
// every host agrees on the boundaries.
//
// A period starts at the first instant of its local start date: local
// midnight, or, when a clock change skips midnight, the first instant that
// exists after it. It ends where the next period starts. A local date that a
// zone skipped entirely (Pacific/Apia skipped 30 December 2011) starts no
// period of its own.
//
// The package is pure: no clock, no I/O beyond reading the embedded
// database once per zone.
package calendar

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// zoneinfo is the IANA time-zone database (release 2025c) in the layout Go
// ships as lib/time/zoneinfo.zip. budgetd reads zones only from here, never
// from the host, so a boundary does not depend on where budgetd runs.
//
//go:embed zoneinfo.zip
var zoneinfo []byte

// TZDataVersion is the release of the embedded time-zone database.
const TZDataVersion = "2025c"

// ErrUnknownZone is returned for a zone name the embedded database does not
// hold.
var ErrUnknownZone = errors.New("unknown time zone")

var zones struct {
	once  sync.Once
	files map[string]*zip.File
	err   error
	mu    sync.RWMutex
	cache map[string]*time.Location
}

// LoadZone returns the named IANA zone ("Europe/Berlin", "UTC") from the
// embedded database, or ErrUnknownZone. Names are case-sensitive, as in
// the database.
func LoadZone(name string) (*time.Location, error) {
	zones.once.Do(func() {
		r, err := zip.NewReader(bytes.NewReader(zoneinfo), int64(len(zoneinfo)))
		if err != nil {
			zones.err = fmt.Errorf("embedded time-zone database: %w", err)
			return
		}
		zones.files = make(map[string]*zip.File, len(r.File))
		for _, f := range r.File {
			zones.files[f.Name] = f
		}
		zones.cache = map[string]*time.Location{}
	})
	if zones.err != nil {
		return nil, zones.err
	}
	if name == "UTC" {
		return time.UTC, nil
	}
	// Every decision on a periodic limit looks its zone up: readers share
	// the lock, only a first load takes it alone.
	zones.mu.RLock()
	loc, ok := zones.cache[name]
	zones.mu.RUnlock()
	if ok {
		return loc, nil
	}
	zones.mu.Lock()
	defer zones.mu.Unlock()
	if loc, ok := zones.cache[name]; ok {
		return loc, nil
	}
	f, ok := zones.files[name]
	if !ok || strings.HasSuffix(name, "/") {
		return nil, fmt.Errorf("%w %q", ErrUnknownZone, name)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return nil, err
	}
	loc, err = time.LoadLocationFromTZData(name, data)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrUnknownZone, name, err)
	}
	zones.cache[name] = loc
	return loc, nil
}

// Unit is the length of a period.
type Unit uint8

// The units a period can have.
const (
	Day Unit = iota + 1
	Week
	Month
	Quarter
	Year
)

var unitNames = [...]string{Day: "day", Week: "week", Month: "month", Quarter: "quarter", Year: "year"}

// ParseUnit reads "day", "week", "month", "quarter" or "year".
func ParseUnit(s string) (Unit, bool) {
	for u := Day; u <= Year; u++ {
		if unitNames[u] == s {
			return u, true
		}
	}
	return 0, false
}

func (u Unit) String() string {
	if u >= Day && u <= Year {
		return unitNames[u]
	}
	return fmt.Sprintf("Unit(%d)", u)
}

// Period is a calendar period rule. StartDay is the ISO weekday a week
// starts on (1 = Monday … 7 = Sunday) or the day of the month a month or
// quarter starts on (1–28); it is ignored for days and years. Quarters start
// in January, April, July and October.
type Period struct {
	Every    Unit
	Zone     *time.Location
	StartDay int
}

// date is a local calendar date.
type date struct {
	y int
	m time.Month
	d int
}

func (d date) add(years int, months int, days int) date {
	t := time.Date(d.y, d.m+time.Month(months), d.d+days, 12, 0, 0, 0, time.UTC).AddDate(years, 0, 0)
	return date{t.Year(), t.Month(), t.Day()}
}

func (d date) before(o date) bool {
	if d.y != o.y {
		return d.y < o.y
	}
	if d.m != o.m {
		return d.m < o.m
	}
	return d.d < o.d
}

// step moves a period's start date by k periods.
func (p Period) step(d date, k int) date {
	switch p.Every {
	case Week:
		return d.add(0, 0, 7*k)
	case Month:
		return d.add(0, k, 0)
	case Quarter:
		return d.add(0, 3*k, 0)
	case Year:
		return d.add(k, 0, 0)
	}
	return d.add(0, 0, k)
}

// candidate is the start date of the period whose local dates include l.
func (p Period) candidate(l date) date {
	sd := p.StartDay
	switch p.Every {
	case Week:
		if sd < 1 || sd > 7 {
			sd = 1
		}
		wd := int(time.Date(l.y, l.m, l.d, 12, 0, 0, 0, time.UTC).Weekday())
		if wd == 0 {
			wd = 7
		}
		return l.add(0, 0, -((wd - sd + 7) % 7))
	case Month:
		if sd < 1 || sd > 28 {
			sd = 1
		}
		c := date{l.y, l.m, sd}
		if l.before(c) {
			c = c.add(0, -1, 0)
		}
		return c
	case Quarter:
		if sd < 1 || sd > 28 {
			sd = 1
		}
		c := date{l.y, l.m - (l.m-1)%3, sd}
		if l.before(c) {
			c = c.add(0, -3, 0)
		}
		return c
	case Year:
		return date{l.y, time.January, 1}
	}
	return l
}

// first is the first instant whose local wall clock in loc reads d 00:00
// or later: local midnight, or the end of a clock change that skipped it.
func first(d date, loc *time.Location) time.Time {
	wall := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC) // the wall clock as if it were UTC
	// Walk the zone's segments (spans of one UTC offset) from two days before;
	// within a segment the wall clock is the instant plus its offset.
	t := wall.Add(-48 * time.Hour)
	for range 64 {
		_, off := t.In(loc).Zone()
		start, end := t.In(loc).ZoneBounds()
		if start.IsZero() || start.Before(t) {
			start = t
		}
		o := time.Duration(off) * time.Second
		if !start.Add(o).Before(wall) {
			return start // the segment begins at or past midnight: a skipped midnight
		}
		at := wall.Add(-o)
		if end.IsZero() || at.Before(end) {
			return at
		}
		t = end
	}
	// Not reached for real zones: fall back on Go's own choice.
	return time.Date(d.y, d.m, d.d, 0, 0, 0, 0, loc)
}

// Bounds returns the start of the period that contains t and the start of
// the next one (start ≤ t < end).
func (p Period) Bounds(t time.Time) (start, end time.Time) {
	// Nearly every call falls in the period the last call on the same rule
	// found: remember it, a few nanoseconds against a calendar walk.
	slot := &recent[maphash.Comparable(recentSeed, p)%uint64(len(recent))]
	if r := slot.Load(); r != nil && r.p == p && !t.Before(r.start) && t.Before(r.end) {
		return r.start, r.end
	}
	start, end = p.bounds(t)
	slot.Store(&recentBounds{p: p, start: start, end: end})
	return start, end
}

// recentBounds is a period that Bounds found, for its rule.
type recentBounds struct {
	p          Period
	start, end time.Time
}

// recent caches one period per slot, the slot chosen by the rule's hash;
// a slot holds whichever rule used it last. A period's bounds never change,
// so a cached one is the answer for every instant inside it.
var (
	recent     [256]atomic.Pointer[recentBounds]
	recentSeed = maphash.MakeSeed()
)

// bounds is Bounds without the cache.
func (p Period) bounds(t time.Time) (start, end time.Time) {
	loc := p.Zone
	if loc == nil {
		loc = time.UTC
	}
	lt := t.In(loc)
	d := p.candidate(date{lt.Year(), lt.Month(), lt.Day()})
	// A clock change can put t's local date on the wrong side of a boundary
	// (a repeated hour across midnight): settle by instants.
	for first(d, loc).After(t) {
		d = p.step(d, -1)
	}
	next := p.step(d, 1)
	for !first(next, loc).After(t) {
		d, next = next, p.step(next, 1)
	}
	return first(d, loc), first(next, loc)
}

// Starts returns n consecutive period starts, strictly increasing, the
// first being the start of the period that contains t; periods of zero
// length (a skipped local date) are left out.
func (p Period) Starts(t time.Time, n int) []time.Time {
	start, end := p.Bounds(t)
	out := make([]time.Time, 0, n)
	out = append(out, start)
	for len(out) < n {
		out = append(out, end)
		_, end = p.Bounds(end)
	}
	return out
}
