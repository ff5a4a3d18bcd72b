package http_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDashboardLevels: the bucket page plots the series budgetd computes
// (GET …/levels), shows when a monthly cap resets, draws the capacity in
// force now over the current period only (budgetd gives no capacity for
// earlier periods) and says so, says whether the limit records denials,
// labels a month of activity by day, writes amounts to the digits they need,
// and says whether "fullest first" covers the whole limit.
func TestDashboardLevels(t *testing.T) {
	b := browser(t)
	t.Run("monthly cap", func(t *testing.T) {
		eachStore(t, func(t *testing.T, a *api) {
			a.clock.Set(time.Date(2026, 3, 31, 20, 0, 0, 0, time.UTC)) // 22:00 in Berlin
			a.expect("PUT", "/v1/limits/monthly", `{"capacity":"100","period":{"every":"month","tz":"Europe/Berlin"},"history":true}`, 200)
			path := "/v1/limits/monthly/buckets/team"
			for _, step := range []struct {
				after time.Duration
				cost  string
			}{{0, "30"}, {time.Hour, "12.5"}, {2 * time.Hour, "5"}, {24 * time.Hour, "1"}} {
				a.clock.Advance(step.after)
				a.expect("POST", path+"/fillup", `{"cost":"`+step.cost+`"}`, 200)
			}
			series, raw := a.levels(path + "/levels?points=400")
			var events []string
			for _, it := range series.Items {
				if it.Event != "" {
					events = append(events, it.At+" "+it.Level)
				}
			}
			tb := openAPITab(t, b, a)
			tb.open("#/l/monthly/b/team")
			tb.wait(`document.querySelector('svg.chart path.level')`)
			var got struct {
				Points  string
				Events  []string
				Reset   string
				Resets  string
				Note    string
				Ticks   []string
				From    string
				To      string
				Summary string
			}
			tb.eval(`({Points: document.querySelector('svg.chart path.level').dataset.points,
				Events: [...document.querySelectorAll('svg.chart circle.point')].map(c => c.dataset.time + " " + c.dataset.level),
				Reset: document.querySelector('svg.chart line.reset')?.dataset.time ?? "",
				Resets: document.querySelector('#bucket-stats [data-field=resets_at]')?.textContent ?? "",
				Note: document.querySelector('#resets')?.textContent ?? "",
				Ticks: [...document.querySelectorAll('svg.chart text.tick')].map(t => t.textContent),
				From: document.querySelector('svg.chart').dataset.from, To: document.querySelector('svg.chart').dataset.to})`, &got)
			if got.Points != jsonInt(len(series.Items)) || strings.Join(got.Events, ",") != strings.Join(events, ",") ||
				got.From != series.From || got.To != series.To {
				t.Errorf("the plot is not the series: %+v\nseries: %.500s", got, raw)
			}
			// The reset in the viewer's zone (this browser's is UTC) and in the limit's.
			const reset = "Apr 30, 2026, 10:00 PM UTC · May 1, 2026, 12:00 AM Europe/Berlin"
			if got.Reset != "2026-03-31T22:00:00.000000Z" || spaces(got.Resets) != reset ||
				!strings.Contains(spaces(got.Note), reset) || !strings.Contains(got.Note, "month in Europe/Berlin") {
				t.Errorf("reset not shown: %+v", got)
			}
			// 27 hours: every 6 hours, the date at midnight (UTC).
			if strings.Join(got.Ticks, ",") != "Apr 1,06:00,12:00,18:00" {
				t.Errorf("ticks %q", got.Ticks)
			}
			// The window starts in March: the capacity line (the capacity
			// now) starts at April's period start, where the reset line is,
			// and the legend says why there is none before it (issue 43).
			capLine := chartCapacity(t, tb)
			if capLine.From != "2026-03-31T22:00:00.000000Z" || capLine.X1 != capLine.ResetX || capLine.X1 == capLine.Left ||
				capLine.Scope != "period" || capLine.Capacity != "100" ||
				!strings.Contains(capLine.Legend, "capacity 100 in this period only (budgetd gives no capacity for earlier periods)") {
				t.Errorf("the capacity line crosses the earlier period, or the legend does not say it stops: %+v", capLine)
			}
			var note string
			tb.eval(`document.querySelector('#chart-note').textContent`, &note)
			if !strings.Contains(note, "This limit does not record denials (record_denials is off), so none are drawn.") {
				t.Errorf("chart note %q", note)
			}
		})
	})
	t.Run("a month of activity", func(t *testing.T) {
		a := newAPI(t)
		t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
		a.clock.Set(t0)
		a.expect("PUT", "/v1/limits/spend", `{"capacity":"5000","leak":{"amount":"5000","per":"720h"},"history":true}`, 200)
		for day := range 30 {
			a.clock.Set(t0.Add(time.Duration(day) * 24 * time.Hour))
			a.expect("POST", "/v1/limits/spend/buckets/team/fillup", `{"cost":"250.10"}`, 200)
		}
		a.clock.Set(t0.Add(30 * 24 * time.Hour))
		tb := openAPITab(t, b, a)
		tb.open("#/l/spend/b/team")
		tb.wait(`document.querySelectorAll('svg.chart circle.point').length === 30`)
		var ticks []string
		tb.eval(`[...document.querySelectorAll('svg.chart text.tick')].map(t => t.textContent)`, &ticks)
		day := regexp.MustCompile(`^Mar [0-9]{1,2}$`)
		if len(ticks) < 4 || len(ticks) > 9 {
			t.Errorf("%d ticks for a month: %q", len(ticks), ticks)
		}
		for _, tk := range ticks {
			if !day.MatchString(tk) {
				t.Errorf("tick %q is not a day of March: %q", tk, ticks)
			}
		}
		// The level now has 12 digits; the page shows the capacity's (at
		// least 2) in the viewer's number format, the exact value in the
		// title.
		state := a.expect("GET", "/v1/limits/spend/buckets/team", "", 200).str("level")
		var shown struct{ Text, Title string }
		tb.eval(`({Text: document.querySelector('#bucket-stats [data-field=level]').textContent,
			Title: document.querySelector('#bucket-stats [data-field=level]').parentElement.title})`, &shown)
		var want string
		tb.eval(`fmtAmount(`+jsString(state)+`, 2)`, &want)
		if shown.Title != state || shown.Text != enUS(want) || len(want) > len("0000.00") {
			t.Errorf("level %q shown as %+v (want %q)", state, shown, want)
		}
		// A leaky limit has no periods: the line is the capacity across the
		// window.
		if capLine := chartCapacity(t, tb); capLine.X1 != capLine.Left || capLine.Scope != "window" || capLine.Legend != "capacity 5,000" {
			t.Errorf("a leaky limit's capacity line: %+v", capLine)
		}
		tb.screenshot("dashboard-bucket-month")
	})
	t.Run("failed logins in a rolling window", func(t *testing.T) {
		a := newAPI(t)
		t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
		a.clock.Set(t0)
		a.expect("PUT", "/v1/limits/logins", `{"capacity":"5","window":{"length":"1m"},"record_denials":true}`, 200)
		for i := range 6 {
			a.clock.Set(t0.Add(time.Duration(i) * 5 * time.Second))
			a.do("POST", "/v1/limits/logins/buckets/alice/fillup", `{"cost":"1"}`)
		}
		a.clock.Set(t0.Add(2 * time.Minute))
		tb := openAPITab(t, b, a)
		tb.open("")
		tb.wait(`document.body.textContent.includes("at most 5 in any 1m (slots of 1s)")`)
		tb.open("#/l/logins/b/alice")
		tb.wait(`document.querySelectorAll('svg.chart circle.point').length === 6`)
		var got struct {
			Denied []string
			Legend bool
			Rows   []string
		}
		tb.eval(`({Denied: [...document.querySelectorAll('svg.chart circle.point.denied')].map(c => c.dataset.time + " " + c.dataset.level),
			Legend: !!document.querySelector('.legend .d'),
			Rows: [...document.querySelectorAll('[data-field=event]')].map(td => td.textContent)})`, &got)
		if strings.Join(got.Denied, ",") != "2026-03-01T09:00:25.000000Z 5" || !got.Legend || len(got.Rows) != 6 || got.Rows[0] != "denied" {
			t.Errorf("denials on the page: %+v", got)
		}
		// The note under the chart says what is true of denials: recorded
		// and drawn (it said "denials are not recorded" under this chart).
		var note string
		tb.eval(`document.querySelector('#chart-note').textContent`, &note)
		if !strings.Contains(note, "This limit records denials (record_denials): each is an open red dot") || strings.Contains(note, "not recorded") {
			t.Errorf("chart note with record_denials on: %q", note)
		}
		// The level falls back as the slots age out, one a second from 09:01:01.
		series, _ := a.levels("/v1/limits/logins/buckets/alice/levels?points=10")
		last := series.Items[len(series.Items)-1]
		if last.Level != "0" {
			t.Errorf("level at the end %s", last.Level)
		}
		tb.screenshot("dashboard-window-denials")
		// record_denials turned off: the denial recorded before is still in
		// the history and drawn, and the note says why.
		a.expect("PUT", "/v1/limits/logins", `{"capacity":"5","window":{"length":"1m"},"record_denials":false}`, 200)
		series, _ = a.levels("/v1/limits/logins/buckets/alice/levels?points=10")
		denied := 0
		for _, it := range series.Items {
			if it.Event == "denied" {
				denied++
			}
		}
		tb.open("#/l/logins/b/alice")
		tb.wait(`document.querySelector('#chart-note')?.textContent.includes("it is off now")`)
		var shown int
		tb.eval(`document.querySelectorAll('svg.chart circle.point.denied').length`, &shown)
		if denied != 1 || shown != 1 {
			t.Errorf("after record_denials off: %d denials in the series, %d drawn, want 1", denied, shown)
		}
	})
	t.Run("amounts", func(t *testing.T) {
		a := newAPI(t)
		tb := openAPITab(t, b, a)
		tb.open("")
		tb.wait(`document.querySelector('#limits') || document.querySelector('.note')`)
		for in, want := range map[string]string{
			"3.333333333334": "3.33", "0.005": "0.01", "12.5": "12.5", "9.999": "10", "1200": "1200",
			"0.004999999999": "0", "2.10": "2.10", "1.000000000001": "1",
		} {
			var got string
			tb.eval(`fmtAmount(`+jsString(in)+`, 2)`, &got)
			if got != want {
				t.Errorf("fmtAmount(%s) = %q, want %q", in, got, want)
			}
		}
	})
	t.Run("fullest first", func(t *testing.T) {
		a := newAPI(t)
		a.limit("few", "100", "1", "1h")
		a.limit("wide", "100", "1", "1h")
		for i := range 3 {
			a.expect("POST", "/v1/limits/few/buckets/k"+jsonInt(i)+"/fillup", `{"cost":"`+jsonInt(10*(i+1))+`"}`, 200)
		}
		for i := range 51 {
			a.expect("POST", "/v1/limits/wide/buckets/k"+jsonInt(100+i)+"/fillup", `{"cost":"1"}`, 200)
		}
		tb := openAPITab(t, b, a)
		for name, want := range map[string]string{"few": "all 3 buckets of this limit", "wide": "within this page only"} {
			tb.open("#/l/" + name)
			tb.wait(`document.querySelector('#order')`)
			var note string
			tb.eval(`document.querySelector('#order').textContent`, &note)
			if !strings.Contains(note, want) {
				t.Errorf("%s: order note %q, want %q", name, note, want)
			}
		}
		var keys []string
		tb.open("#/l/few")
		tb.wait(`document.querySelectorAll('#buckets tbody tr').length === 3`)
		tb.eval(`[...document.querySelectorAll('#buckets tbody tr')].map(r => r.dataset.key)`, &keys)
		if strings.Join(keys, " ") != "k2 k1 k0" {
			t.Errorf("order %q", keys)
		}
	})
}

// chartCapacity is the capacity line of the bucket page's chart and its
// legend: where the line starts (x1, and the time in data-from), the left
// edge of the plot and the x of the period-start line, for comparison.
type chartCapacityLine struct {
	X1, Left, ResetX, From, Capacity, Scope, Legend string
}

func chartCapacity(t *testing.T, tb *tab) chartCapacityLine {
	t.Helper()
	var c chartCapacityLine
	tb.eval(`(() => { const l = document.querySelector('svg.chart line.cap'), g = document.querySelector('.legend .c');
		return {X1: l.getAttribute('x1'), Left: "64", ResetX: document.querySelector('svg.chart line.reset')?.getAttribute('x1') ?? "",
			From: l.dataset.from, Capacity: g.dataset.capacity, Scope: g.dataset.scope, Legend: g.textContent}; })()`, &c)
	return c
}
