package limitsfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

const goodYAML = `# the team's limits
limits:
  - name: team-spend
    capacity: 5000.00
    period: {every: month, tz: Europe/Berlin}
    thresholds: ["80%", "4500.00"]
  - name: import-rows
    capacity: 999999999999.999999
    leak:
      amount: 25000
      per: 1h
    history: false
  - name: logins
    capacity: "5"
    window: {length: 1m}
overrides:
  - limit: team-spend
    pattern: enterprise-*
    capacity: 50000
  - limit: not-in-this-file
    pattern: acme
    capacity: 7
envoy:
  - domain: api
    descriptors:
      - entries: [{key: tenant}, {key: path, value: /import}]
        limit: import-rows
        bucket: "{tenant}"
`

const goodJSON = `{
  "limits": [
    {"name": "team-spend", "capacity": "5000.00", "period": {"every": "month", "tz": "Europe/Berlin"}, "thresholds": ["80%", "4500.00"]},
    {"name": "import-rows", "capacity": 999999999999.999999, "leak": {"amount": "25000", "per": "1h"}, "history": false},
    {"name": "logins", "capacity": "5", "window": {"length": "1m"}}
  ],
  "overrides": [
    {"limit": "team-spend", "pattern": "enterprise-*", "capacity": "50000"},
    {"limit": "not-in-this-file", "pattern": "acme", "capacity": 7}
  ],
  "envoy": [
    {"domain": "api", "descriptors": [{"entries": [{"key": "tenant"}, {"key": "path", "value": "/import"}], "limit": "import-rows", "bucket": "{tenant}"}]}
  ]
}`

// TestParseGood: the same file in YAML and in JSON reads the same, amounts
// exactly as written (no float on the way), with the defaults the server
// fills in.
func TestParseGood(t *testing.T) {
	for name, src := range map[string]string{"yaml": goodYAML, "json": goodJSON} {
		t.Run(name, func(t *testing.T) {
			f, err := Parse([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Limits) != 3 || len(f.Overrides) != 2 || len(f.Envoy) != 1 {
				t.Fatalf("%d limits, %d overrides, %d domains", len(f.Limits), len(f.Overrides), len(f.Envoy))
			}
			spend, rows, logins := f.Limits[0], f.Limits[1], f.Limits[2]
			if spend.Name != "team-spend" || spend.Limit.Capacity.String() != "5000" || spend.Limit.Capacity.Exponent() != -2 {
				t.Errorf("team-spend capacity %s (exponent %d), want 5000.00", spend.Limit.Capacity, spend.Limit.Capacity.Exponent())
			}
			if p := spend.Limit.Period; p == nil || p.TZ != "Europe/Berlin" || p.Every != "month" {
				t.Errorf("team-spend period %+v", p)
			}
			if !spend.Limit.History || spend.Limit.Mode != ledger.ModeEnforce || len(spend.Limit.Thresholds) != 2 {
				t.Errorf("team-spend defaults: history %v, mode %q, thresholds %v", spend.Limit.History, spend.Limit.Mode, spend.Limit.Thresholds)
			}
			if want := decimal.RequireFromString("999999999999.999999"); !rows.Limit.Capacity.Equal(want) {
				t.Errorf("import-rows capacity %s, want %s exactly", rows.Limit.Capacity, want)
			}
			if rows.Limit.History || rows.Limit.LeakPer != time.Hour || rows.Limit.LeakAmount.String() != "25000" {
				t.Errorf("import-rows %+v", rows.Limit)
			}
			if w := logins.Limit.Window; w == nil || w.Length != time.Minute || w.Precision != time.Second {
				t.Errorf("logins window %+v, want 1m with the default precision 1s", w)
			}
			o := f.Overrides[0]
			if o.Limit != "team-spend" || o.Override.Pattern != "enterprise-*" || o.Override.Capacity.Decimal.String() != "50000" {
				t.Errorf("override %+v", o)
			}
			if d := f.Envoy[0]; d.Domain != "api" || d.Descriptors[0].Limit != "import-rows" || *d.Descriptors[0].Entries[1].Value != "/import" {
				t.Errorf("envoy %+v", d)
			}
			if name == "yaml" && (spend.Line != 3 || rows.Line != 7 || f.Overrides[1].Line != 20) {
				t.Errorf("lines %d %d %d, want 3 7 20", spend.Line, rows.Line, f.Overrides[1].Line)
			}
		})
	}
	for _, src := range []string{"{}", "limits: []\n", "limits:\noverrides:\nenvoy:\n", "# only a comment\n{}\n"} {
		f, err := Parse([]byte(src))
		if err != nil || len(f.Limits)+len(f.Overrides)+len(f.Envoy) != 0 {
			t.Errorf("%q: %+v, %v; want an empty file", src, f, err)
		}
	}
}

// TestParseBad: every kind of bad file is refused whole, naming the line
// and the path of the field.
func TestParseBad(t *testing.T) {
	const leak = "    leak: {amount: 1, per: 1s}\n"
	for _, tc := range []struct {
		name, src string
		line      int
		field     string
		reason    string
	}{
		{"empty", "", 1, "", "empty"},
		{"syntax", "limits:\n  - name: a\n    capacity: [1\n", 3, "", "malformed YAML"},
		{"json syntax", "{\"limits\": [\n{\"name\" \"a\"}\n]}", 2, "", "malformed YAML"},
		{"two documents", "limits: []\n---\nlimits: []\n", 3, "", "more than one YAML document"},
		{"not a mapping", "- a\n- b\n", 0, "", "must be a mapping"},
		{"unknown top member", "limits: []\nlimit: []\n", 2, "limit", "unknown member"},
		{"limits not a list", "limits: {name: a}\n", 1, "limits", "must be a list"},
		{"limit not a mapping", "limits:\n  - a\n", 2, "limits[0]", "must be a mapping"},
		{"name missing", "limits:\n  - capacity: 1\n" + leak, 2, "limits[0].name", "is required"},
		{"name not a string", "limits:\n  - name: [a]\n    capacity: 1\n", 2, "limits[0].name", "must be a string"},
		{"bad name", "limits:\n  - name: Team\n    capacity: 1\n" + leak, 2, "limits[0].name", "limit names"},
		{"unknown field", "limits:\n  - name: a\n    capacity: 1\n" + leak + "    histroy: false\n", 5, "limits[0].histroy", "unknown field"},
		{"unknown nested field", "limits:\n  - name: a\n    capacity: 1\n    leak: {amount: 1, per: 1s, every: 2}\n", 4, "limits[0].leak.every", "unknown field"},
		{"duplicate key", "limits:\n  - name: a\n    capacity: 1\n    capacity: 2\n" + leak, 4, "", "already defined"},
		{"duplicate key in JSON", "{\"limits\":[{\"name\":\"a\",\n\"capacity\":\"1\",\n\"capacity\":\"2\"}]}", 3, "", "already defined"},
		{"float capacity", "limits:\n  - name: a\n    capacity: 1e2\n" + leak, 3, "limits[0].capacity", "plain decimal"},
		{"too many digits", "limits:\n  - name: a\n    capacity: 0.1234567\n" + leak, 3, "limits[0].capacity", "plain decimal"},
		{"hex capacity", "limits:\n  - name: a\n    capacity: 0x10\n" + leak, 3, "limits[0].capacity", ""},
		{"zero capacity", "limits:\n  - name: a\n    capacity: 0\n" + leak, 3, "limits[0].capacity", "greater than"},
		{"capacity missing", "limits:\n  - name: a\n" + leak, 2, "limits[0].capacity", ""},
		{"no kind", "limits:\n  - name: a\n    capacity: 1\n", 2, "limits[0].leak", "needs leak"},
		{"two kinds", "limits:\n  - name: a\n    capacity: 1\n" + leak + "    window: {length: 1m}\n", 5, "limits[0].window", "not several"},
		{"bad per", "limits:\n  - name: a\n    capacity: 1\n    leak: {amount: 1, per: 1 hour}\n", 4, "limits[0].leak.per", ""},
		{"bad zone", "limits:\n  - name: a\n    capacity: 1\n    period:\n      every: month\n      tz: Mars/Olympus\n", 6, "limits[0].period.tz", "time zone"},
		{"bad start day", "limits:\n  - name: a\n    capacity: 1\n    period: {every: day, start_day: 2}\n", 4, "limits[0].period.start_day", "not allowed"},
		{"bad precision", "limits:\n  - name: a\n    capacity: 1\n    window: {length: 1m, precision: 7s}\n", 4, "limits[0].window.precision", ""},
		{"bad mode", "limits:\n  - name: a\n    capacity: 1\n" + leak + "    mode: lenient\n", 5, "limits[0].mode", ""},
		{"grace without soft", "limits:\n  - name: a\n    capacity: 1\n" + leak + "    grace: 10%\n", 5, "limits[0].grace", "soft"},
		{"bad threshold", "limits:\n  - name: a\n    capacity: 1\n" + leak + "    thresholds: [80%, 300%]\n", 5, "limits[0].thresholds[1]", ""},
		{"rollover on a leak", "limits:\n  - name: a\n    capacity: 1\n" + leak + "    rollover: {max: 1}\n", 5, "limits[0].rollover", ""},
		{"wrong type", "limits:\n  - name: a\n    capacity: 1\n" + leak + "    history: maybe\n", 5, "limits[0].history", "boolean"},
		{"duplicate name", "limits:\n  - name: a\n    capacity: 1\n" + leak + "  - name: a\n    capacity: 2\n" + leak, 5, "limits[1].name", "already defined by limits[0]"},
		{"second limit bad", "limits:\n  - name: a\n    capacity: 1\n" + leak + "  - name: b\n    capacity: -2\n" + leak, 6, "limits[1].capacity", ""},
		{"override limit missing", "overrides:\n  - pattern: x\n    capacity: 1\n", 2, "overrides[0].limit", "is required"},
		{"override pattern missing", "overrides:\n  - limit: a\n    capacity: 1\n", 2, "overrides[0].pattern", "is required"},
		{"override bad pattern", "overrides:\n  - limit: a\n    pattern: a*b\n    capacity: 1\n", 3, "overrides[0].pattern", "only at the end"},
		{"override unknown field", "overrides:\n  - limit: a\n    pattern: x\n    capacity: 1\n    every: day\n", 5, "overrides[0].every", "unknown field"},
		{"override bad capacity", "overrides:\n  - limit: a\n    pattern: x\n    capacity: 1.0000001\n", 4, "overrides[0].capacity", ""},
		{"override of another kind", "limits:\n  - name: a\n    capacity: 1\n" + leak + "overrides:\n  - limit: a\n    pattern: x\n    window: {length: 1m}\n", 8, "overrides[0].window", "leak limit"},
		{"override twice", "overrides:\n  - limit: a\n    pattern: x\n    capacity: 1\n  - limit: a\n    pattern: x\n    capacity: 2\n", 6, "overrides[1].pattern", "already defined by overrides[0]"},
		{"override bad expiry", "overrides:\n  - limit: a\n    pattern: x\n    capacity: 1\n    expires_at: tomorrow\n", 5, "overrides[0].expires_at", ""},
		{"envoy not a list", "envoy: {domain: api}\n", 1, "envoy", "must be a list"},
		{"envoy unknown field", "envoy:\n  - domain: api\n    descriptors:\n      - entries: [{key: a}]\n        limit: x\n        bucket: b\n        cost: 2\n", 7, "envoy[0].descriptors[0].cost", "unknown field"},
		{"envoy no domain", "envoy:\n  - descriptors: []\n", 2, "envoy[0].domain", "required"},
		{"envoy domain twice", "envoy:\n  - domain: api\n  - domain: api\n", 3, "envoy[1].domain", "already mapped"},
		{"envoy bad template", "envoy:\n  - domain: api\n    descriptors:\n      - entries: [{key: a}]\n        limit: x\n        bucket: \"{b}\"\n", 6, "envoy[0].descriptors[0].bucket", ""},
		{"envoy bad limit", "envoy:\n  - domain: api\n    descriptors:\n      - entries: [{key: a}]\n        limit: X\n        bucket: b\n", 5, "envoy[0].descriptors[0].limit", ""},
		{"tag", "limits:\n  - name: a\n    capacity: !!float 1\n" + leak, 3, "limits[0].capacity", "tags"},
		{"merge key", "base: &b {capacity: 1}\nlimits:\n  - <<: *b\n    name: a\n", 3, "limits[0]", "merge keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.src))
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Parse = %+v, %v; want an *Error", f, err)
			}
			if f != nil {
				t.Errorf("a refused file still gave %+v", f)
			}
			if fe.Line != tc.line || fe.Field != tc.field || !strings.Contains(fe.Reason, tc.reason) {
				t.Errorf("got line %d, field %q, reason %q; want line %d, field %q, a reason with %q", fe.Line, fe.Field, fe.Reason, tc.line, tc.field, tc.reason)
			}
			if tc.line > 0 && !strings.Contains(err.Error(), "line ") {
				t.Errorf("%q does not name the line", err)
			}
		})
	}
}

// TestParseAliases: anchors and aliases are YAML's and are followed; an
// alias that would blow the file up is refused rather than expanded.
func TestParseAliases(t *testing.T) {
	f, err := Parse([]byte("limits:\n  - name: a\n    capacity: 1\n    leak: &rate {amount: 1, per: 1s}\n  - name: b\n    capacity: 2\n    leak: *rate\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Limits[1].Limit.LeakPer != time.Second {
		t.Errorf("b's leak %+v, want a's", f.Limits[1].Limit)
	}
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	if _, err := Parse([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "expand to more than") {
		t.Errorf("a billion laughs: %v, want refused for its size", err)
	}
}
