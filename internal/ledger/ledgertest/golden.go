package ledgertest

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// golden.json holds extreme (limit, state, now, cost) cases with the answer
// every store must give, field by field: the largest and smallest amounts and
// rates, leaks that round, idle gaps of a century, a clock going back, levels
// at the overflow bound, and calendar periods across month ends, DST and
// skipped midnights. The answers were produced by the pure rule (through the
// memory store) and checked by hand where docs/rounding.md makes that easy;
// they are frozen, so that no rewrite of the arithmetic — on any store —
// changes one answer unnoticed. A clock goes back at most ledger.ClockStep
// here: a larger step back is a fault of the store's clock that each store
// handles on its own (PostgreSQL and Redis take the stored time as now; the
// memory store's clock is monotonic and cannot step). Regenerate only on
// purpose:
//
//	go test ./internal/ledger/ledgertest -run TestGoldenFile -update
//
//go:embed golden.json
var goldenJSON []byte

// GoldenCase is one golden vector: a limit, a start instant and steps.
type GoldenCase struct {
	Name  string        `json:"name"`
	Limit GoldenLimit   `json:"limit"`
	Start string        `json:"start"`
	Steps []*GoldenStep `json:"steps"`
}

// GoldenLimit is the limit of a case: a leak (amount per Go duration), a
// calendar period or a rolling window.
type GoldenLimit struct {
	Capacity string        `json:"capacity"`
	Amount   string        `json:"amount,omitempty"`
	Per      string        `json:"per,omitempty"`
	Period   *GoldenPeriod `json:"period,omitempty"`
	Window   *GoldenWindow `json:"window,omitempty"`
}

// GoldenWindow is a rolling window as the API spells it (Precision "" is
// the default).
type GoldenWindow struct {
	Length    string `json:"length"`
	Precision string `json:"precision,omitempty"`
}

// GoldenPeriod is a calendar period as the API spells it.
type GoldenPeriod struct {
	Every    string `json:"every"`
	TZ       string `json:"tz"`
	StartDay int    `json:"start_day,omitempty"`
}

// GoldenStep is one operation after the clock moved by After (a Go
// duration, possibly negative). Op is fillup, can, drain, reserve (TTL),
// commit or release (Hold: the index of an earlier reserve of the case,
// Amount optional for commit), or state. Want is what the store answers.
type GoldenStep struct {
	After   string            `json:"after,omitempty"`
	Op      string            `json:"op"`
	Key     string            `json:"key"`
	Amount  string            `json:"amount,omitempty"`
	TTL     string            `json:"ttl,omitempty"`
	Hold    int               `json:"hold,omitempty"`
	Overrun bool              `json:"overrun,omitempty"`
	Want    map[string]string `json:"want"`
}

// GoldenCases parses the embedded golden file.
func GoldenCases() ([]*GoldenCase, error) {
	var cases []*GoldenCase
	if err := json.Unmarshal(goldenJSON, &cases); err != nil {
		return nil, fmt.Errorf("golden.json: %w", err)
	}
	return cases, nil
}

// testGolden runs every golden case on the store and demands the frozen
// answers exactly.
func testGolden(t *testing.T, e *env) {
	cases, err := GoldenCases()
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			e := &env{t: t, clock: e.clock, store: e.store, svc: e.svc, ctx: e.ctx}
			got := runGolden(e, fmt.Sprintf("golden%d", i), c)
			for j, s := range c.Steps {
				if diff := goldenDiff(s.Want, got[j]); diff != "" {
					t.Errorf("step %d (%s %s %s after %s): %s", j, s.Op, s.Key, s.Amount, s.After, diff)
				}
			}
		})
	}
}

// runGolden plays case c on e's store under the limit name and returns what
// the store answered at each step.
func runGolden(e *env, name string, c *GoldenCase) []map[string]string {
	t := e.t
	t.Helper()
	start, err := time.Parse(time.RFC3339Nano, c.Start)
	if err != nil {
		t.Fatalf("start %q: %v", c.Start, err)
	}
	e.clock.Set(start)
	goldenLimit(e, name, c)
	var holds []string
	var out []map[string]string
	for j, s := range c.Steps {
		if s.After != "" {
			d, err := time.ParseDuration(s.After)
			if err != nil {
				t.Fatalf("step %d after %q: %v", j, s.After, err)
			}
			e.clock.Advance(d)
		}
		out = append(out, goldenStep(e, name, j, s, &holds))
	}
	return out
}

// goldenLimit puts case c's limit under name.
func goldenLimit(e *env, name string, c *GoldenCase) {
	t := e.t
	t.Helper()
	if w := c.Limit.Window; w != nil {
		length, err := time.ParseDuration(w.Length)
		if err != nil {
			t.Fatalf("window length %q: %v", w.Length, err)
		}
		var precision time.Duration
		if w.Precision != "" {
			if precision, err = time.ParseDuration(w.Precision); err != nil {
				t.Fatalf("window precision %q: %v", w.Precision, err)
			}
		}
		spec := ledger.LimitSpec{Capacity: dec(c.Limit.Capacity), Window: &ledger.Window{Length: length, Precision: precision}, History: true}
		if _, err := e.svc.PutLimit(e.ctx, name, spec); err != nil {
			t.Fatalf("PutLimit(%s): %v", name, err)
		}
	} else if c.Limit.Period != nil {
		p := ledger.Period{Every: c.Limit.Period.Every, TZ: c.Limit.Period.TZ, StartDay: c.Limit.Period.StartDay}
		e.periodic(name, c.Limit.Capacity, p, true)
	} else {
		per, err := time.ParseDuration(c.Limit.Per)
		if err != nil {
			t.Fatalf("per %q: %v", c.Limit.Per, err)
		}
		e.limit(name, c.Limit.Capacity, c.Limit.Amount, per, true)
	}
}

// goldenStep plays step j, s, of a case on the limit name and returns what
// the store answered; holds are the ids of the case's reserves so far.
func goldenStep(e *env, name string, j int, s *GoldenStep, holds *[]string) map[string]string {
	t := e.t
	t.Helper()
	r := ref(name, s.Key)
	obs := map[string]string{}
	var amount decimal.Decimal
	if s.Amount != "" {
		amount = dec(s.Amount)
	}
	switch s.Op {
	case "fillup":
		res, err := e.svc.Fillup(e.ctx, []ledger.Item{{Bucket: r, Cost: amount}}, ledger.Idempotency{})
		if observeErr(obs, err) {
			decision(obs, res.Items[0].Accepted, res.Items[0].NeverFits, res.Items[0].Level, res.Items[0].Held, res.Items[0].Remaining, res.Items[0].RetryAfter)
			periodFields(obs, res.Items[0].PeriodStart, res.Items[0].ResetsAt)
		}
	case "can":
		d, err := e.svc.CanAccept(e.ctx, r, amount)
		if observeErr(obs, err) {
			decision(obs, d.Accepted, d.NeverFits, d.Level, d.Held, d.Remaining, d.RetryAfter)
			periodFields(obs, d.PeriodStart, d.ResetsAt)
		}
	case "drain":
		res, err := e.svc.Drain(e.ctx, r, amount, ledger.Idempotency{}, nil)
		if observeErr(obs, err) {
			obs["removed"] = res.Removed.String()
			bucketState(obs, res.Bucket)
		}
	case "reserve":
		ttl, perr := time.ParseDuration(s.TTL)
		if perr != nil {
			t.Fatalf("step %d ttl %q: %v", j, s.TTL, perr)
		}
		res, err := e.svc.Reserve(e.ctx, r, amount, ttl, ledger.Idempotency{}, nil)
		*holds = append(*holds, res.Reservation.ID)
		if observeErr(obs, err) {
			d := res.Decision
			decision(obs, d.Accepted, d.NeverFits, d.Level, d.Held, d.Remaining, d.RetryAfter)
			periodFields(obs, d.PeriodStart, d.ResetsAt)
		}
	case "commit", "release":
		if s.Hold >= len(*holds) || (*holds)[s.Hold] == "" {
			t.Fatalf("step %d: no accepted reserve number %d", j, s.Hold)
		}
		var res ledger.ResolveResult
		var err error
		if s.Op == "commit" {
			var a decimal.NullDecimal
			if s.Amount != "" {
				a = decimal.NewNullDecimal(amount)
			}
			res, err = e.svc.Commit(e.ctx, (*holds)[s.Hold], a, s.Overrun, ledger.Idempotency{}, nil)
		} else {
			res, err = e.svc.Release(e.ctx, (*holds)[s.Hold], ledger.Idempotency{}, nil)
		}
		obs["state"] = string(res.Reservation.State)
		if observeErr(obs, err) {
			bucketState(obs, res.Bucket)
		}
	case "state":
		st, err := e.svc.Bucket(e.ctx, r)
		if observeErr(obs, err) {
			bucketState(obs, st)
		}
	default:
		t.Fatalf("step %d: unknown op %q", j, s.Op)
	}
	return obs
}

// observeErr records a refusal's code and reports whether the call
// succeeded; any other error fails the test.
func observeErr(obs map[string]string, err error) bool {
	if err == nil {
		return true
	}
	var r *ledger.Refusal
	if errors.As(err, &r) {
		obs["refusal"] = r.Code
		return false
	}
	var inv *ledger.InvalidError
	if errors.As(err, &inv) {
		obs["invalid"] = string(inv.Code) + " " + inv.Field
		return false
	}
	obs["error"] = err.Error()
	return false
}

func decision(obs map[string]string, accepted, never bool, level, held, remaining, retry fmt.Stringer) {
	obs["accepted"] = strconv.FormatBool(accepted)
	obs["never_fits"] = strconv.FormatBool(never)
	obs["level"] = level.String()
	obs["held"] = held.String()
	obs["remaining"] = remaining.String()
	obs["retry_after"] = retry.String()
}

func bucketState(obs map[string]string, st ledger.BucketState) {
	obs["level"] = st.Level.String()
	obs["held"] = st.Held.String()
	obs["remaining"] = st.Remaining.String()
	periodFields(obs, st.PeriodStart, st.ResetsAt)
}

func periodFields(obs map[string]string, start, resets time.Time) {
	if !start.IsZero() {
		obs["period_start"] = start.UTC().Format(time.RFC3339Nano)
		obs["resets_at"] = resets.UTC().Format(time.RFC3339Nano)
	}
}

// goldenDiff describes how got differs from want; amounts compare as
// decimals, everything else as text.
func goldenDiff(want, got map[string]string) string {
	var diff string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			diff += fmt.Sprintf("%s missing (want %s); ", k, w)
			continue
		}
		if g != w {
			wd, werr := decimal.NewFromString(w)
			gd, gerr := decimal.NewFromString(g)
			if werr != nil || gerr != nil || !wd.Equal(gd) {
				diff += fmt.Sprintf("%s = %s, want %s; ", k, g, w)
			}
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diff += fmt.Sprintf("unexpected %s = %s; ", k, g)
		}
	}
	return diff
}
