package limitsfile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/shopspring/decimal"
)

// served is a budgetd (the ledger service on the memory store) holding
// the state a file states.
func served(t *testing.T, src string) (Target, State) {
	t.Helper()
	target := Service(ledger.NewService(memory.New()))
	if src != "" {
		p, err := NewPlan(mustParse(t, src), State{}, false, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Apply(context.Background(), target); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Read(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	return target, s
}

func mustParse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// steps is a plan in short: "limit a create", "override a x change
// capacity 1→2".
func steps(p *Plan) []string {
	var out []string
	for _, s := range p.Steps {
		line := "limit " + s.Limit
		if s.Pattern != "" {
			line = "override " + s.Limit + " " + s.Pattern
		}
		line += " " + string(s.Action)
		if s.Action == Change {
			for _, c := range s.Changes {
				line += " " + c.Field + " " + c.Old + "→" + c.New
			}
		}
		out = append(out, line)
	}
	return out
}

const base = `limits:
  - name: spend
    capacity: 5000.00
    period: {every: month}
  - name: rows
    capacity: 100
    leak: {amount: 10, per: 1s}
  - name: logins
    capacity: 5
    window: {length: 1m}
    thresholds: ["80%"]
overrides:
  - limit: spend
    pattern: big-*
    capacity: 9000
`

// TestPlan: a file compared with what budgetd holds plans per limit and
// override; what the file leaves out compares equal to the server's
// default; only prune deletes.
func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name, state, file string
		prune             bool
		want              []string
	}{
		{"all new", "", base, false, []string{"limit spend create", "limit rows create", "limit logins create", "override spend big-* create"}},
		{"the same", base, base, false, []string{"limit spend unchanged", "limit rows unchanged", "limit logins unchanged", "override spend big-* unchanged"}},
		{"defaults written out", base, `limits:
  - name: spend
    capacity: "5000"
    period: {every: month, tz: UTC, start_day: 1}
    history: true
    record_denials: false
    mode: enforce
  - name: logins
    capacity: 5.000
    window: {length: 60s, precision: 1s}
    thresholds: ["80.00%"]
`, false, []string{"limit spend unchanged", "limit logins unchanged"}},
		{"changes", base, `limits:
  - name: spend
    capacity: 6000
    period: {every: month, tz: Europe/Berlin}
    history: false
  - name: rows
    capacity: 100
    window: {length: 1h}
overrides:
  - limit: spend
    pattern: big-*
    capacity: 9000
    expires_at: "2999-01-01T00:00:00Z"
  - limit: logins
    pattern: bot
    window: {length: 10s}
`, false, []string{
			"limit spend change capacity 5000→6000 history true→false period.tz UTC→Europe/Berlin",
			"limit rows change leak.amount 10→ leak.per 1s→ window.length →1h window.precision →1m",
			"override spend big-* change expires_at →2999-01-01T00:00:00.000000Z",
			"override logins bot create",
		}},
		{"no prune keeps", base, "limits:\n  - name: rows\n    capacity: 100\n    leak: {amount: 10, per: 1s}\n", false, []string{"limit rows unchanged"}},
		{"prune deletes", base, "limits:\n  - name: rows\n    capacity: 100\n    leak: {amount: 10, per: 1s}\n", true, []string{"limit rows unchanged", "limit logins delete", "limit spend delete"}},
		{"prune keeps an override's limit", base, "overrides:\n  - limit: spend\n    pattern: small\n    capacity: 1\n", true, []string{
			"limit logins delete", "limit rows delete", "override spend small create", "override spend big-* delete",
		}},
		{"empty file prunes all", base, "{}", true, []string{"limit logins delete", "limit rows delete", "limit spend delete"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s := served(t, tc.state)
			p, err := NewPlan(mustParse(t, tc.file), s, tc.prune, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if got := steps(p); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestPlanRefuses: an override that cannot be applied refuses the whole
// plan, naming the line and the field.
func TestPlanRefuses(t *testing.T) {
	_, s := served(t, base)
	for _, tc := range []struct{ name, file, field, reason string }{
		{"no such limit", "overrides:\n  - limit: nope\n    pattern: x\n    capacity: 1\n", "overrides[0].limit", "no limit"},
		{"another kind than budgetd's limit", "overrides:\n  - limit: rows\n    pattern: x\n    period: {tz: Europe/Berlin}\n", "overrides[0].period", "leak limit"},
		{"expired", "overrides:\n  - limit: rows\n    pattern: x\n    capacity: 1\n    expires_at: \"2001-01-01T00:00:00Z\"\n", "overrides[0].expires_at", "not in the future"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPlan(mustParse(t, tc.file), s, false, time.Now())
			var fe *Error
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Line != 2 || !strings.Contains(fe.Reason, tc.reason) {
				t.Fatalf("NewPlan = %v, %v; want an *Error at line 2 naming %s (%s)", p, err, tc.field, tc.reason)
			}
		})
	}
}

// TestApply: applying a plan brings budgetd to the file's state, applying
// the file again plans no change, and prune deletes what it names.
func TestApply(t *testing.T) {
	ctx := context.Background()
	target, s := served(t, "")
	f := mustParse(t, base)
	p, err := NewPlan(f, s, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(ctx, target); err != nil {
		t.Fatal(err)
	}
	s, _ = Read(ctx, target)
	if len(s.Limits) != 3 || len(s.Overrides["spend"]) != 1 || s.Limits[2].Name != "spend" || !s.Limits[2].Capacity.Equal(decimal.NewFromInt(5000)) {
		t.Fatalf("after apply: %+v", s)
	}
	again, err := NewPlan(f, s, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if again.Changed() {
		t.Fatalf("the same file again plans %v", steps(again))
	}
	var out strings.Builder
	again.Write(&out)
	if !strings.HasSuffix(out.String(), "no changes (4 unchanged)\n") {
		t.Errorf("printed %q", out.String())
	}
	prune, err := NewPlan(mustParse(t, "limits:\n  - name: rows\n    capacity: 200\n    leak: {amount: 10, per: 1s}\n"), s, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	prune.Write(&out)
	for _, want := range []string{"limit rows: change\n    capacity: 100 → 200\n", "limit spend: delete\n", "plan: 0 to create, 1 to change, 2 to delete, 0 unchanged\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed plan lacks %q:\n%s", want, out.String())
		}
	}
	if err := prune.Apply(ctx, target); err != nil {
		t.Fatal(err)
	}
	s, _ = Read(ctx, target)
	if len(s.Limits) != 1 || s.Limits[0].Name != "rows" || s.Limits[0].Capacity.String() != "200" || len(s.Overrides) != 0 {
		t.Fatalf("after prune: %+v", s)
	}
}

// TestExportRoundTrip: what Export writes parses, and planned against the
// state it came from plans no change, whatever the names (YAML's true,
// null and numbers among them) and settings.
func TestExportRoundTrip(t *testing.T) {
	_, s := served(t, `limits:
  - name: "true"
    capacity: 5000.00
    period: {every: quarter, tz: America/New_York, start_day: 15}
    rollover: {max: 100}
    thresholds: ["80%", "4500.00"]
    record_denials: true
  - name: "1e2"
    capacity: 999999999999.999999
    leak: {amount: 0.000001, per: 87600h}
    mode: soft
    grace: 12.5%
    history: false
  - name: "null"
    capacity: 3
    window: {length: 720h, precision: 24h}
    mode: shadow
  - name: "0x10"
    capacity: 1
    period: {every: week, start_day: 7}
overrides:
  - {limit: "true", pattern: "*", capacity: 1}
  - {limit: "true", pattern: "- x: #y", period: {tz: Asia/Tokyo}}
  - {limit: "1e2", pattern: "yes", leak: {amount: 1, per: 1s}, expires_at: "2999-12-31T23:59:59.123456Z"}
  - {limit: "null", pattern: "null*", window: {length: 1h}}
`)
	b, err := Export(s)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(b)
	if err != nil {
		t.Fatalf("the export does not parse: %v\n%s", err, b)
	}
	p, err := NewPlan(f, s, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if p.Changed() || len(p.Steps) != 8 {
		t.Errorf("export → plan: %v\n%s", steps(p), b)
	}
	if empty, err := Export(State{}); err != nil || !strings.Contains(string(empty), "limits: []") {
		t.Errorf("an empty export: %q, %v", empty, err)
	}
}
