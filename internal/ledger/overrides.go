package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Override is a limit's terms for one key (an exact Pattern) or for every key
// that starts with a prefix (a Pattern ending in "*"): SPEC "Terms per
// customer". A zero field is not set and comes from the limit: Capacity
// (Valid), the leak rate (LeakPer non-zero, a leaky limit's), TZ and StartDay
// (a periodic limit's), WindowLength (a window limit's, with its default
// precision). ExpiresAt, when not zero, is the instant from which it no
// longer applies.
type Override struct {
	Pattern      string
	Capacity     decimal.NullDecimal
	LeakAmount   decimal.Decimal
	LeakPer      time.Duration
	TZ           string
	StartDay     int
	WindowLength time.Duration
	ExpiresAt    time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// ErrOverrideNotFound: the limit has no override of that pattern, or it has
// expired (404 override_not_found).
var ErrOverrideNotFound = errors.New("override not found")

// MaxPatternBytes bounds a pattern: a key and its "*".
const MaxPatternBytes = MaxKeyBytes + 1

// Prefix reports whether o applies to every key starting with its pattern
// (without the "*"), and returns that prefix.
func (o Override) Prefix() (string, bool) {
	if p, ok := strings.CutSuffix(o.Pattern, "*"); ok {
		return p, true
	}
	return o.Pattern, false
}

// ActiveAt reports whether o applies at now: it has no expiry or now is
// before it.
func (o Override) ActiveAt(now time.Time) bool {
	return o.ExpiresAt.IsZero() || now.Before(o.ExpiresAt)
}

// Matches reports whether o's pattern covers key.
func (o Override) Matches(key string) bool {
	p, prefix := o.Prefix()
	if prefix {
		return strings.HasPrefix(key, p)
	}
	return key == p
}

// ValidatePattern checks an override's pattern: an exact key (ValidateKey),
// or a prefix of one followed by a single "*" at the end (the empty prefix
// "*" covers every key). Errors name "pattern".
func ValidatePattern(pattern string) error {
	if pattern == "" {
		return invalid(CodeInvalidRequest, "pattern", "the pattern is empty; give a key or a prefix ending in *")
	}
	p, _ := strings.CutSuffix(pattern, "*")
	if strings.Contains(p, "*") {
		return invalid(CodeInvalidRequest, "pattern", "* is allowed only at the end of a pattern")
	}
	if p == "" {
		return nil
	}
	if err := ValidateKey(p); err != nil {
		var ie *InvalidError
		if errors.As(err, &ie) {
			return &InvalidError{Code: CodeInvalidRequest, Field: "pattern", Reason: ie.Reason}
		}
		return err
	}
	return nil
}

// validateOverride checks o against the limit l it belongs to, at now (the
// caller's view of the store's clock): every field of l's kind, valid as on
// a limit, and an expiry in the future. Errors name the field.
func validateOverride(l Limit, o Override, now time.Time) error {
	if err := ValidatePattern(o.Pattern); err != nil {
		return err
	}
	if o.Capacity.Valid {
		if err := checkAmount("capacity", o.Capacity.Decimal, true); err != nil {
			return err
		}
	}
	kind := l.Kind()
	if o.LeakPer != 0 || !o.LeakAmount.IsZero() {
		if kind != "leak" {
			return invalid(CodeInvalidRequest, "leak", "the limit is a %s limit; an override sets only the terms of its limit's kind", kind)
		}
		if err := checkAmount("leak.amount", o.LeakAmount, true); err != nil {
			return err
		}
		if o.LeakPer < time.Microsecond || o.LeakPer > MaxPer || o.LeakPer%time.Microsecond != 0 {
			return invalid(CodeInvalidDuration, "leak.per", "must be a whole number of microseconds between 1µs and %s", MaxPer)
		}
	}
	if o.TZ != "" || o.StartDay != 0 {
		if kind != "period" {
			return invalid(CodeInvalidRequest, "period", "the limit is a %s limit; an override sets only the terms of its limit's kind", kind)
		}
		if _, err := overridePeriod(*l.Period, o); err != nil {
			return err
		}
	}
	if o.WindowLength != 0 {
		if kind != "window" {
			return invalid(CodeInvalidRequest, "window", "the limit is a %s limit; an override sets only the terms of its limit's kind", kind)
		}
		if _, err := ValidateWindow(o.WindowLength, 0); err != nil {
			var ie *InvalidError
			if errors.As(err, &ie) {
				return &InvalidError{Code: ie.Code, Field: "window.length", Reason: ie.Reason}
			}
			return err
		}
	}
	if !o.ExpiresAt.IsZero() {
		if !o.ExpiresAt.After(now) {
			return invalid(CodeInvalidRequest, "expires_at", "%s is not in the future", o.ExpiresAt.UTC().Format(time.RFC3339Nano))
		}
		if o.ExpiresAt.Nanosecond()%int(time.Microsecond) != 0 {
			return invalid(CodeInvalidRequest, "expires_at", "must be a whole number of microseconds")
		}
	}
	return nil
}

// overridePeriod is the limit's period p with o's tz and start_day.
func overridePeriod(p Period, o Override) (Period, error) {
	tz, sd := &p.TZ, &p.StartDay
	if o.TZ != "" {
		tz = &o.TZ
	}
	if o.StartDay != 0 {
		sd = &o.StartDay
	}
	if *sd == 0 {
		sd = nil
	}
	return ValidatePeriod(p.Every, tz, sd)
}

// Apply returns the effective limit of a bucket that o applies to: l with
// o's fields in place of the limit's and Override naming o's pattern. A
// field of another kind than l's (left by a later PUT that switched the
// limit's kind) is not applied.
func (o Override) Apply(l Limit) Limit {
	l.Override = o.Pattern
	if o.Capacity.Valid {
		l.Capacity = o.Capacity.Decimal
	}
	switch l.Kind() {
	case "leak":
		if o.LeakPer != 0 {
			l.LeakAmount, l.LeakPer = o.LeakAmount, o.LeakPer
		}
	case "period":
		if o.TZ != "" || o.StartDay != 0 {
			if p, err := overridePeriod(*l.Period, o); err == nil {
				l.Period = &p
			}
		}
	case "window":
		if o.WindowLength != 0 {
			if w, err := ValidateWindow(o.WindowLength, 0); err == nil {
				l.Window = &w
			}
		}
	}
	return l
}

// Overrides is one limit's overrides, indexed for resolution: an exact map
// and one map per prefix length, so that finding the most specific override
// of a key costs one lookup per distinct prefix length no longer than the
// key (not per override). It is not safe for concurrent use; the memory
// store guards it with its limits lock.
type Overrides struct {
	exact   map[string]Override
	prefix  map[string]Override
	lengths []int // distinct prefix lengths, longest first
	counts  map[int]int
}

// Len returns how many overrides there are, expired ones included.
func (s *Overrides) Len() int {
	if s == nil {
		return 0
	}
	return len(s.exact) + len(s.prefix)
}

// Clone returns a copy of s that changes independently of it (nil for nil).
func (s *Overrides) Clone() *Overrides {
	if s == nil {
		return nil
	}
	return &Overrides{exact: maps.Clone(s.exact), prefix: maps.Clone(s.prefix), lengths: slices.Clone(s.lengths), counts: maps.Clone(s.counts)}
}

// Put adds o or replaces the override of its pattern.
func (s *Overrides) Put(o Override) {
	if s.exact == nil {
		s.exact, s.prefix, s.counts = map[string]Override{}, map[string]Override{}, map[int]int{}
	}
	p, prefix := o.Prefix()
	if !prefix {
		s.exact[p] = o
		return
	}
	if _, ok := s.prefix[p]; !ok {
		s.counts[len(p)]++
		if s.counts[len(p)] == 1 {
			s.lengths = append(s.lengths, len(p))
			sort.Sort(sort.Reverse(sort.IntSlice(s.lengths)))
		}
	}
	s.prefix[p] = o
}

// Get returns the override of pattern, expired or not.
func (s *Overrides) Get(pattern string) (Override, bool) {
	if s == nil || s.exact == nil {
		return Override{}, false
	}
	p, prefix := Override{Pattern: pattern}.Prefix()
	var o Override
	var ok bool
	if prefix {
		o, ok = s.prefix[p]
	} else {
		o, ok = s.exact[p]
	}
	return o, ok
}

// Delete removes the override of pattern and reports whether there was one.
func (s *Overrides) Delete(pattern string) bool {
	if _, ok := s.Get(pattern); !ok {
		return false
	}
	p, prefix := Override{Pattern: pattern}.Prefix()
	if !prefix {
		delete(s.exact, p)
		return true
	}
	delete(s.prefix, p)
	s.counts[len(p)]--
	if s.counts[len(p)] == 0 {
		delete(s.counts, len(p))
		i := sort.Search(len(s.lengths), func(i int) bool { return s.lengths[i] <= len(p) })
		s.lengths = append(s.lengths[:i], s.lengths[i+1:]...)
	}
	return true
}

// Resolve returns the override that applies to key at now: the exact one,
// else the one of the longest prefix of key, skipping expired ones.
func (s *Overrides) Resolve(key string, now time.Time) (Override, bool) {
	if s == nil || s.exact == nil {
		return Override{}, false
	}
	if o, ok := s.exact[key]; ok && o.ActiveAt(now) {
		return o, true
	}
	for _, n := range s.lengths {
		if n > len(key) {
			continue
		}
		if o, ok := s.prefix[key[:n]]; ok && o.ActiveAt(now) {
			return o, true
		}
	}
	return Override{}, false
}

// Candidates calls fn with each override whose pattern covers key, expired
// ones included, most specific first (the exact one, then the prefixes
// longest first), until fn returns false. Resolve takes the first of them
// active at now.
func (s *Overrides) Candidates(key string, fn func(Override) bool) {
	if s == nil || s.exact == nil {
		return
	}
	if o, ok := s.exact[key]; ok && !fn(o) {
		return
	}
	for _, n := range s.lengths {
		if n > len(key) {
			continue
		}
		if o, ok := s.prefix[key[:n]]; ok && !fn(o) {
			return
		}
	}
}

// Effective returns l as it applies to key at now: with the override that
// resolves, or l itself.
func (s *Overrides) Effective(l Limit, key string, now time.Time) Limit {
	if o, ok := s.Resolve(key, now); ok {
		return o.Apply(l)
	}
	return l
}

// List returns up to n overrides active at now with patterns > after, in
// byte order of pattern.
func (s *Overrides) List(after string, n int, now time.Time) []Override {
	if s == nil {
		return nil
	}
	var out []Override
	for _, m := range []map[string]Override{s.exact, s.prefix} {
		for _, o := range m {
			if o.Pattern > after && o.ActiveAt(now) {
				out = append(out, o)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pattern < out[j].Pattern })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// OverrideStore is a Store that keeps overrides (SPEC "Terms per
// customer") and decides every call on a bucket with the effective limit:
// the limit with the override that applies to the bucket's key at the
// store's clock of the call, named in Limit.Override of each Snapshot. A
// store that is not one refuses overrides (ErrNotServed).
type OverrideStore interface {
	Store
	// PutOverride creates or replaces the override of o.Pattern on the limit
	// (ErrLimitNotFound when there is none), with CreatedAt and UpdatedAt
	// from the store's clock. Every bucket whose rule (leak rate, period,
	// window) changes with it is settled at now as a PutLimit that changes
	// the rule settles it. It is validated (ValidateOverride) against the
	// limit as stored, inside the step.
	PutOverride(ctx context.Context, limit string, o Override) (Override, error)
	// GetOverride returns the override of pattern, ErrOverrideNotFound when
	// there is none or it has expired.
	GetOverride(ctx context.Context, limit, pattern string) (Override, error)
	// ListOverrides returns up to n unexpired overrides with patterns >
	// after, in byte order.
	ListOverrides(ctx context.Context, limit, after string, n int) ([]Override, error)
	// DeleteOverride removes an override (ErrOverrideNotFound when none or
	// expired), settling the buckets whose rule changes.
	DeleteOverride(ctx context.Context, limit, pattern string) error
}

// OverridesOf returns the OverrideStore that st is or wraps (through Unwrap
// methods), and false when there is none.
func OverridesOf(st Store) (OverrideStore, bool) {
	return As[OverrideStore](st)
}

// ValidateOverride checks o against its limit l at now; stores call it
// inside the step that writes o.
func ValidateOverride(l Limit, o Override, now time.Time) error { return validateOverride(l, o, now) }

// overrides returns the store's OverrideStore or ErrNotServed.
func (s *Service) overrides() (OverrideStore, error) {
	os, ok := OverridesOf(s.store)
	if !ok {
		return nil, fmt.Errorf("overrides: %w", ErrNotServed)
	}
	return os, nil
}

// PutOverride creates or replaces an override of the limit name.
func (s *Service) PutOverride(ctx context.Context, name string, o Override) (Override, error) {
	if err := ValidateName(name); err != nil {
		return Override{}, ErrLimitNotFound
	}
	if err := ValidatePattern(o.Pattern); err != nil {
		return Override{}, err
	}
	os, err := s.overrides()
	if err != nil {
		return Override{}, err
	}
	return os.PutOverride(ctx, name, o)
}

// GetOverride returns one override of the limit name.
func (s *Service) GetOverride(ctx context.Context, name, pattern string) (Override, error) {
	if err := ValidateName(name); err != nil {
		return Override{}, ErrLimitNotFound
	}
	if err := ValidatePattern(pattern); err != nil {
		return Override{}, err
	}
	os, err := s.overrides()
	if err != nil {
		return Override{}, err
	}
	return os.GetOverride(ctx, name, pattern)
}

// ListOverrides returns up to n overrides of the limit name after a pattern.
func (s *Service) ListOverrides(ctx context.Context, name, after string, n int) ([]Override, error) {
	if err := ValidateName(name); err != nil {
		return nil, ErrLimitNotFound
	}
	if n < 1 || n > MaxPage+1 {
		return nil, invalid(CodeInvalidRequest, "limit", "must be a whole number from 1 to %d", MaxPage)
	}
	os, err := s.overrides()
	if err != nil {
		return nil, err
	}
	return os.ListOverrides(ctx, name, after, n)
}

// DeleteOverride removes one override of the limit name.
func (s *Service) DeleteOverride(ctx context.Context, name, pattern string) error {
	if err := ValidateName(name); err != nil {
		return ErrLimitNotFound
	}
	if err := ValidatePattern(pattern); err != nil {
		return err
	}
	os, err := s.overrides()
	if err != nil {
		return err
	}
	return os.DeleteOverride(ctx, name, pattern)
}
