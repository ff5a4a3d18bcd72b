package http_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/shopspring/decimal"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/testenv"
)

// The dashboard tests open /ui/ in headless Chromium (Debian's chromium
// package), driven over the DevTools protocol with chromedp, against budgetd
// on each store. They read what a person sees (text of the page) and compare
// it with the API's answers at the same pinned clock.
//
// Without a browser they skip locally and fail under CI=true. Set
// BUDGETD_SCREENSHOTS to a directory to save a PNG of each page there
// (docs/ keeps the ones in the README).

// xssKey is a bucket key that would run script if the page parsed it as HTML.
const xssKey = `<script>window.__xss=1</script><img src=x onerror="window.__xss=2">`

// browser starts one headless Chromium for the test and returns a context
// whose tabs share it. The viewer reads en-US numbers in UTC unless opts
// say otherwise (chromedp.Env("TZ=…"), chromedp.Flag("lang", …)).
func browser(t *testing.T, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := os.Getenv("BUDGETD_TEST_CHROMIUM")
	if path == "" {
		path = testenv.Program(t, "chromium", "chromium-browser", "google-chrome")
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append([]chromedp.ExecAllocatorOption{
		chromedp.Env("TZ=UTC"),
		chromedp.Flag("lang", "en-US"),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 900),
	}, opts...)...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // start the browser now, without a deadline
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// tab is one browser tab on a budgetd.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string
	// token, when the API requires one (BUDGETD_TEST_AUTH=1), is put in the
	// tab's sessionStorage before the first page, as a person would enter it.
	token  string
	seeded bool
}

// openAPITab is openTab on a test API, with its token when it needs one.
func openAPITab(t *testing.T, b context.Context, a *api) *tab {
	t.Helper()
	tb := openTab(t, b, a.url)
	tb.token = a.token
	return tb
}

func openTab(t *testing.T, b context.Context, base string) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b)
	t.Cleanup(cancel)
	// The first call on a context makes its tab, which lives as long as the
	// context of that call: no deadline here.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return &tab{t: t, ctx: ctx, base: base}
}

func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("browser: %v", err)
	}
}

func (tb *tab) open(hash string) {
	tb.t.Helper()
	if tb.token != "" && !tb.seeded {
		tok, _ := json.Marshal(tb.token)
		// A page of the same origin that is not the dashboard, so that the
		// dashboard's first load already finds the token.
		tb.do(chromedp.Navigate(tb.base + "/openapi.json"))
		if _, err := chromedp.Run(tb.ctx, chromedp.Evaluate[any](`sessionStorage.setItem("budgetd.token", `+string(tok)+`)`)); err != nil {
			tb.t.Fatalf("seed the token: %v", err)
		}
		tb.seeded = true
	}
	tb.do(chromedp.Navigate(tb.base + "/ui/" + hash))
}

// wait waits until the JavaScript expression is truthy.
func (tb *tab) wait(expr string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 15*time.Second)
	defer cancel()
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
		if err == nil {
			return
		}
		// A poll started while the page's JavaScript context was being
		// replaced (right after a navigation, on a busy machine) is bound to
		// the old one; poll again in the new one until the deadline.
		if strings.Contains(err.Error(), "Cannot find context with specified id") && ctx.Err() == nil {
			continue
		}
		text, _ := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		tb.t.Fatalf("waiting for %s: %v\npage text:\n%s", expr, err, text)
	}
}

// click clicks the first element sel selects, in one step in the page: the
// dashboard re-renders its tables as it polls, so a node found by one
// DevTools call may be gone by the next (chromedp.Click's "Could not find
// node with given id").
func (tb *tab) click(sel string) {
	tb.t.Helper()
	q, _ := json.Marshal(sel)
	var clicked bool
	tb.eval(`(() => { const e = document.querySelector(`+string(q)+`); if (!e) return false; e.click(); return true })()`, &clicked)
	if !clicked {
		tb.t.Fatalf("click %s: no such element", sel)
	}
}

// eval evaluates expr and decodes its JSON value into out.
func (tb *tab) eval(expr string, out any) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(`+expr+`)`))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", expr, err)
	}
	if err := json.Unmarshal([]byte(raw), out); err != nil {
		tb.t.Fatalf("evaluate %s: %v in %s", expr, err, raw)
	}
}

// screenshot saves the viewport as name.png under $BUDGETD_SCREENSHOTS.
func (tb *tab) screenshot(name string) {
	dir := os.Getenv("BUDGETD_SCREENSHOTS")
	if dir == "" {
		return
	}
	tb.t.Helper()
	png, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		tb.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
}

// scrollTo scrolls the page to the first element that selector matches,
// for a screenshot of it.
func (tb *tab) scrollTo(selector string) {
	tb.t.Helper()
	var ok bool
	tb.eval(`(document.querySelector(`+jsString(selector)+`).scrollIntoView(), true)`, &ok)
}

// rows reads a table's body rows as maps of data-field → text, with the
// row's data-key / data-id / data-limit under "_".
func (tb *tab) rows(table string) []map[string]string {
	tb.t.Helper()
	var out []map[string]string
	tb.eval(`[...document.querySelectorAll(`+jsString(table+` tbody tr`)+`)].map(tr => {
		const r = {_: tr.dataset.key ?? tr.dataset.id ?? tr.dataset.limit};
		tr.querySelectorAll('[data-field]').forEach(td => r[td.dataset.field] = td.textContent);
		const a = tr.querySelector('a'); if (a) r.link = a.textContent;
		return r;
	})`, &out)
	return out
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// dashboardData creates two limits and charges over the API at known
// instants, and returns, oldest first, the level that the API reported after
// each history entry of team/a.
func dashboardData(t *testing.T, a *api) []string {
	// Pin the store's clock near the real one, so the chart's "now" (the
	// browser's clock) is close to the entries.
	a.clock.Set(time.Now().Add(-time.Minute).Truncate(time.Second))
	a.limit("team-spend", "100", "1", "1s")
	a.limit("rows", "5000", "5000", "720h")
	a.expect("PUT", "/v1/limits/quiet", `{"capacity":"10","leak":{"amount":"1","per":"1m"},"history":false}`, 200)
	team := "/v1/limits/team-spend/buckets/team%2Fa"
	var levels []string
	charge := func(path, body string, status int) {
		levels = append(levels, a.expect("POST", path, body, status).str("level"))
	}
	charge(team+"/fillup", `{"cost":"30"}`, 200)
	a.clock.Advance(10 * time.Second)
	charge(team+"/fillup", `{"cost":"12.5"}`, 200)
	a.clock.Advance(4 * time.Second)
	charge(team+"/reservations", `{"amount":"20","ttl":"1h"}`, 201)
	a.clock.Advance(50 * time.Second) // leaks to zero on the way
	charge(team+"/fillup", `{"cost":"7.25"}`, 200)
	a.clock.Advance(time.Second)
	charge(team+"/drain", `{"amount":"2"}`, 200)
	a.expect("POST", "/v1/limits/team-spend/buckets/team%2Fb/fillup", `{"cost":"90"}`, 200)
	a.expect("POST", "/v1/limits/team-spend/buckets/%C3%A9t%C3%A9/fillup", `{"cost":"50"}`, 200)
	a.expect("POST", "/v1/limits/team-spend/buckets/"+url.PathEscape(xssKey)+"/fillup", `{"cost":"5"}`, 200)
	a.expect("POST", "/v1/limits/rows/buckets/job-1/fillup", `{"cost":"1200"}`, 200)
	return levels
}

type listed struct {
	Items []struct {
		Key       string  `json:"key"`
		Level     string  `json:"level"`
		Held      string  `json:"held"`
		Remaining string  `json:"remaining"`
		Capacity  string  `json:"capacity"`
		UpdatedAt *string `json:"updated_at"`
	} `json:"items"`
}

// TestDashboard runs the browser tests with one Chromium for all of them.
func TestDashboard(t *testing.T) {
	b := browser(t)
	t.Run("pages", func(t *testing.T) { testDashboardPages(t, b) })
	t.Run("phone", func(t *testing.T) { testDashboardPhone(t, b) })
	t.Run("token", func(t *testing.T) { testDashboardToken(t, b) })
	t.Run("meta", func(t *testing.T) { testDashboardMeta(t, b) })
	t.Run("pages of buckets", func(t *testing.T) { testDashboardPager(t, b) })
	t.Run("periods", func(t *testing.T) { testDashboardPeriods(t, b) })
	t.Run("terms", func(t *testing.T) { testDashboardTerms(t, b) })
}

// testDashboardTerms: a bucket's page shows the override that applies to
// it (pattern, what it sets, when it ends) and its active grants with their
// total, as the API answers them; on a store that serves neither the
// section is absent and the page still renders.
func testDashboardTerms(t *testing.T, b context.Context) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC))
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"UTC"},"history":true}`, 200)
		// A key with a slash and markup: the pattern is URL-encoded in the
		// page's call and shown as text.
		key := "acme/<b>eu</b>"
		path := "/v1/limits/team-spend/buckets/" + url.PathEscape(key)
		a.expect("POST", path+"/fillup", `{"cost":"100"}`, 200)
		overrides := a.do("PUT", "/v1/limits/team-spend/overrides/"+url.PathEscape(key), `{"capacity":"8000.00","expires_at":"2026-03-20T00:00:00Z"}`).status == 200
		grants := a.do("POST", path+"/grants", `{"amount":"500.00"}`).status == 201
		state := a.expect("GET", path, "", 200)

		tb := openAPITab(t, b, a)
		tb.open("#/l/team-spend/b/" + url.PathEscape(key))
		tb.wait(`document.querySelector('#history')`)
		var page struct {
			Terms, Override, Grants bool
			Capacity, Legend, Flag  any
			Bold                    int
		}
		probe := func() {
			tb.eval(`({Terms: [...document.querySelectorAll('h2')].some(h => h.textContent === 'Terms'),
				Override: !!document.querySelector('#override'), Grants: !!document.querySelector('#grants-total'),
				Capacity: document.querySelector('#bucket-stats [data-field=capacity]').textContent,
				Legend: document.querySelector('.legend .c').textContent,
				Bold: document.querySelectorAll('#main b').length, Flag: window.__xss ?? null})`, &page)
		}
		probe()
		// The chart's capacity line is the effective capacity, and so is its
		// legend, in the viewer's (en-US) number format.
		if page.Capacity != enUS(state.str("capacity")) || page.Legend != "capacity "+enUS(state.str("capacity")) || page.Bold != 0 || page.Flag != nil {
			t.Errorf("bucket page %+v, API capacity %s", page, state.str("capacity"))
		}
		if !overrides && !grants {
			if page.Terms || page.Override || page.Grants {
				t.Errorf("a store without overrides or grants shows terms: %+v", page)
			}
			return
		}
		if page.Terms != true || page.Override != overrides || page.Grants != grants {
			t.Fatalf("terms section %+v, want overrides %v, grants %v", page, overrides, grants)
		}
		var eff map[string]string
		tb.eval(`Object.fromEntries([...document.querySelectorAll('#effective [data-field]')].map(s => [s.dataset.field, s.textContent]))`, &eff)
		if eff["capacity"] != enUS(state.str("capacity")) || eff["grants"] != enUS(state.str("grants")) {
			t.Errorf("effective capacity %v, API %s", eff, state.raw)
		}
		if overrides {
			o := a.expect("GET", "/v1/limits/team-spend/overrides/"+url.PathEscape(key), "", 200)
			if state.str("override") != key || o.str("pattern") != key {
				t.Fatalf("API: bucket %s, override %s", state.raw, o.raw)
			}
			var shown map[string]struct{ Text, Title string }
			tb.eval(`Object.fromEntries([...document.querySelectorAll('#override dd')].map(d => [d.dataset.field, {Text: d.textContent, Title: d.title}]))`, &shown)
			if shown["pattern"].Text != o.str("pattern") || shown["capacity"].Text != enUS(o.str("capacity")) || eff["base"] != enUS(o.str("capacity")) ||
				shown["expires_at"].Title != o.str("expires_at") || !viewerTime.MatchString(spaces(shown["expires_at"].Text)) {
				t.Errorf("override shown %+v (base %q), API %s", shown, eff["base"], o.raw)
			}
		}
		if grants {
			var list struct {
				Items []struct {
					ID        string `json:"id"`
					Amount    string `json:"amount"`
					ExpiresAt string `json:"expires_at"`
				} `json:"items"`
			}
			if err := json.Unmarshal([]byte(a.expect("GET", path+"/grants", "", 200).raw), &list); err != nil {
				t.Fatal(err)
			}
			var rows []struct{ ID, Amount, Expires string }
			tb.eval(`[...document.querySelectorAll('#grants tbody tr')].map(r => ({ID: r.dataset.id,
				Amount: r.querySelector('[data-field=amount]').textContent, Expires: r.querySelector('[data-field=expires_at]').title}))`, &rows)
			var total string
			tb.eval(`document.querySelector('#grants-total').textContent`, &total)
			if len(list.Items) != 1 || len(rows) != 1 || rows[0].ID != list.Items[0].ID || rows[0].Amount != list.Items[0].Amount ||
				rows[0].Expires != list.Items[0].ExpiresAt || total != state.str("grants") || !decimal.RequireFromString(total).Equal(decimal.RequireFromString("500")) {
				t.Errorf("grants shown %+v, total %q; API %+v, bucket grants %s", rows, total, list.Items, state.str("grants"))
			}
		}
		tb.screenshot("dashboard-bucket-terms")
		if !overrides {
			return
		}
		// The raise ends on time: the page, polling, shows the limit's own
		// terms again (or no terms where grants are not kept).
		a.clock.Set(time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC))
		after := a.expect("GET", path, "", 200)
		tb.wait(`!document.querySelector('#override') && document.querySelector('#bucket-stats [data-field=capacity]').textContent === ` + jsString(enUS(after.str("capacity"))))
		if grants {
			limit := a.expect("GET", "/v1/limits/team-spend", "", 200)
			tb.wait(`document.querySelector('#own-terms') && document.querySelector('#effective [data-field=base]').textContent === ` + jsString(enUS(limit.str("capacity"))))
		}
		if !ledger.ServesRollover(a.store) {
			return
		}
		// With rollover, April's page shows what March left unused (4,900 of
		// the limit's 5,000, at most 1,000) beside the grants.
		a.expect("PUT", "/v1/limits/team-spend", `{"capacity":"5000.00","period":{"every":"month","tz":"UTC"},"rollover":{"max":"1000"}}`, 200)
		a.clock.Set(time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC))
		april := a.expect("GET", path, "", 200)
		if april.str("rollover") != "1000" || april.str("capacity") != "6000" {
			t.Fatalf("April's bucket: %s", april.raw)
		}
		tb.wait(`document.querySelector('#rollover-received')?.textContent === "1,000" && document.querySelector('#effective [data-field=rollover]')?.textContent === "1,000" && ` +
			`document.querySelector('#bucket-stats [data-field=capacity]').textContent === "6,000"`)
	})
}

// testDashboardPeriods: a limit that resets every calendar month shows its
// rule, and its bucket's chart resets at the month's start: the points are
// the levels the API answered, over every store.
func testDashboardPeriods(t *testing.T, b context.Context) {
	eachStore(t, func(t *testing.T, a *api) {
		a.clock.Set(time.Date(2026, 3, 31, 20, 0, 0, 0, time.UTC)) // 22:00 in Berlin
		a.expect("PUT", "/v1/limits/monthly", `{"capacity":"100","period":{"every":"month","tz":"Europe/Berlin"},"history":true,"mode":"soft","grace":"10%"}`, 200)
		path := "/v1/limits/monthly/buckets/team"
		var want []string
		for _, step := range []struct {
			after time.Duration
			cost  string
		}{{0, "30"}, {time.Hour, "12.5"}, {2 * time.Hour, "5"}, {24 * time.Hour, "1"}} {
			a.clock.Advance(step.after)
			want = append(want, a.expect("POST", path+"/fillup", `{"cost":"`+step.cost+`"}`, 200).str("level"))
		}
		if want[2] != "5" {
			t.Fatalf("the month did not reset in the API: %v", want)
		}
		tb := openAPITab(t, b, a)
		tb.open("")
		tb.wait(`document.querySelector('#limits tr[data-limit="monthly"]')`)
		for _, r := range tb.rows("#limits") {
			if r["_"] == "monthly" && r["rule"] != "resets every month (Europe/Berlin), soft: up to 10% over" {
				t.Errorf("limit row %v", r)
			}
		}
		// A store that keeps events draws the thresholds on the chart.
		withThresholds := a.do("PUT", "/v1/limits/monthly", `{"capacity":"100","period":{"every":"month","tz":"Europe/Berlin"},"history":true,"mode":"soft","grace":"10%","thresholds":["50%","90"]}`).status == 200
		tb.open("#/l/monthly/b/team")
		tb.wait(`document.querySelectorAll('svg.chart circle.point').length === 4`)
		if withThresholds {
			var lines []string
			tb.eval(`[...document.querySelectorAll('svg.chart line.threshold')].map(l => l.dataset.threshold + "=" + l.dataset.level)`, &lines)
			if strings.Join(lines, " ") != "50%=50 90=90" {
				t.Errorf("threshold lines %v, want 50%%=50 90=90", lines)
			}
			// A percentage is of the capacity now, which budgetd gives for
			// this period only: its line starts with the capacity line, at
			// the period start; an amount's spans the window (issue 43).
			var x struct{ Cap, Reset, Pct, Amount string }
			tb.eval(`({Cap: document.querySelector('svg.chart line.cap').getAttribute('x1'),
				Reset: document.querySelector('svg.chart line.reset').getAttribute('x1'),
				Pct: document.querySelector('svg.chart line.threshold[data-threshold="50%"]').getAttribute('x1'),
				Amount: document.querySelector('svg.chart line.threshold[data-threshold="90"]').getAttribute('x1')})`, &x)
			if x.Cap != x.Reset || x.Pct != x.Reset || x.Amount != "64" {
				t.Errorf("lines start at %+v: the capacity and the 50%% threshold at the period start, the amount at the left edge (64)", x)
			}
		}
		var got []string
		tb.eval(`[...document.querySelectorAll('svg.chart circle.point')].map(c => c.dataset.level)`, &got)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("chart levels %v, the API answered %v", got, want)
		}
		tb.scrollTo(".legend .c") // the level chart, below the period's burn-down
		tb.screenshot("dashboard-bucket-periodic")
		if withThresholds {
			// The bucket's recent events, newest first, as the API lists them.
			a.expect("POST", path+"/fillup", `{"cost":"85"}`, 200) // used 91: crosses 50% and 90
			var apiEvents struct {
				Items []struct{ ID, Type, Threshold, Used string }
			}
			if err := json.Unmarshal([]byte(a.expect("GET", path+"/events", "", 200).raw), &apiEvents); err != nil {
				t.Fatal(err)
			}
			var wantRows []string
			for _, e := range apiEvents.Items {
				wantRows = append(wantRows, e.ID+" "+strings.TrimPrefix(e.Type, "threshold.")+" "+e.Threshold+" "+e.Used)
			}
			if len(wantRows) != 2 {
				t.Fatalf("the API lists %v, want two crossings", wantRows)
			}
			tb.open("#/l/monthly")
			tb.open("#/l/monthly/b/team")
			tb.wait(`document.querySelectorAll('#events tbody tr').length === 2`)
			var rows []string
			tb.eval(`[...document.querySelectorAll('#events tbody tr')].map(r => [r.dataset.id, ...["type", "threshold", "used"].map(f => r.querySelector('[data-field="' + f + '"]').textContent)].join(" "))`, &rows)
			if strings.Join(rows, "; ") != strings.Join(wantRows, "; ") || !strings.HasSuffix(rows[0], "crossed 90 91") {
				t.Errorf("events table %q, the API lists %q (newest first: the 90 crossing)", rows, wantRows)
			}
		}
	})
}

// viewerTime is the override's end (2026-03-20T00:00:00Z) as the page
// shows it in the browser's own zone, whichever that is: to the second,
// with the zone's name.
var viewerTime = regexp.MustCompile(`^Mar (19|20), 2026, \d\d:\d\d:\d\d [AP]M \S+$`)

// testDashboardPages opens each page of the dashboard over every store and
// checks what it shows against the API.
func testDashboardPages(t *testing.T, b context.Context) {
	eachStore(t, func(t *testing.T, a *api) {
		levels := dashboardData(t, a)
		tb := openAPITab(t, b, a)

		// Limits: capacity, rule and number of buckets.
		tb.open("")
		tb.wait(`document.querySelector('#limits tr[data-limit="team-spend"]') && ` + countsShown)
		limits := tb.rows("#limits")
		if len(limits) != 3 {
			t.Fatalf("limits page rows: %v", limits)
		}
		want := map[string][3]string{"quiet": {"10", "1 per 1m", "0"}, "rows": {"5,000", "5,000 per 720h", "1"}, "team-spend": {"100", "1 per 1s", "4"}}
		for _, r := range limits {
			w := want[r["_"]]
			if r["capacity"] != w[0] || r["rule"] != w[1] || r["buckets"] != w[2] || r["link"] != r["_"] {
				t.Errorf("limit row %v, want capacity, rule, buckets %v", r, w)
			}
		}
		tb.screenshot("dashboard-limits")

		// A limit's buckets: the API's numbers, fullest first, keys as text.
		tb.open("#/l/team-spend")
		tb.wait(`document.querySelectorAll('#buckets tbody tr').length === 4`)
		var list listed
		if err := json.Unmarshal([]byte(a.expect("GET", "/v1/limits/team-spend/buckets", "", 200).raw), &list); err != nil {
			t.Fatal(err)
		}
		byKey := map[string]int{}
		for i, it := range list.Items {
			byKey[it.Key] = i
		}
		rows := tb.rows("#buckets")
		var fill []decimal.Decimal
		for _, r := range rows {
			i, ok := byKey[r["_"]]
			if !ok {
				t.Fatalf("row for unknown key %q", r["_"])
			}
			it := list.Items[i]
			if r["link"] != it.Key || r["level"] != it.Level || r["held"] != it.Held || r["remaining"] != it.Remaining {
				t.Errorf("bucket row %v, API %+v", r, it)
			}
			used := decimal.RequireFromString(it.Level).Add(decimal.RequireFromString(it.Held))
			fill = append(fill, used.Div(decimal.RequireFromString(it.Capacity)))
		}
		if !sort.SliceIsSorted(fill, func(i, j int) bool { return fill[i].GreaterThan(fill[j]) }) {
			t.Errorf("rows not fullest first: %v", fill)
		}
		var bars []string
		tb.eval(`[...document.querySelectorAll('#buckets .bar')].map(b => b.dataset.fill)`, &bars)
		if len(bars) != 4 {
			t.Errorf("bars: %v", bars)
		}
		var xss struct {
			Scripts, Imgs int
			Flag          any
			Text          string
		}
		tb.eval(`({Scripts: document.scripts.length, Imgs: document.images.length, Flag: window.__xss ?? null,
			Text: document.querySelector('#buckets tr[data-key^="<script>"] a')?.textContent ?? ""})`, &xss)
		if xss.Scripts != 1 || xss.Imgs != 0 || xss.Flag != nil || xss.Text != xssKey {
			t.Errorf("a key with markup was not rendered as text: %+v", xss)
		}
		// Who is near the cap: no thresholds on this limit, the top spenders
		// in the API's order, 4 buckets and team/a's one hold.
		tb.wait(`document.querySelector('#no-thresholds') && document.querySelectorAll('#top tbody tr').length === 4`)
		var top struct {
			Keys           []string
			Buckets, Holds string
		}
		tb.eval(`({Keys: [...document.querySelectorAll('#top tbody tr')].map(r => r.dataset.key),
			Buckets: document.querySelector('#limit-stats [data-field=bucket_count]').textContent,
			Holds: document.querySelector('#limit-stats [data-field=hold_count]').textContent})`, &top)
		var ranked listed
		if err := json.Unmarshal([]byte(a.expect("GET", "/v1/limits/team-spend/buckets?order=used", "", 200).raw), &ranked); err != nil {
			t.Fatal(err)
		}
		var rank []string
		for _, it := range ranked.Items {
			rank = append(rank, it.Key)
		}
		if !slices.Equal(top.Keys, rank) || top.Keys[0] != "team/b" || top.Buckets != "4" || top.Holds != "1" {
			t.Errorf("top spenders %q (the API ranks %q), %s buckets, %s holds (want 4 and 1)", top.Keys, rank, top.Buckets, top.Holds)
		}
		tb.screenshot("dashboard-buckets")

		// A bucket: numbers, chart points, holds and history; a new charge
		// shows up without a reload.
		tb.open("#/l/team-spend/b/" + url.PathEscape("team/a"))
		tb.wait(`document.querySelector('#history') && document.querySelector('svg.chart')`)
		state := a.expect("GET", "/v1/limits/team-spend/buckets/team%2Fa", "", 200)
		var stats map[string]string
		tb.eval(`Object.fromEntries([...document.querySelectorAll('#bucket-stats dd')].map(d => [d.dataset.field, d.textContent]))`, &stats)
		for _, f := range []string{"level", "held", "remaining", "capacity"} {
			if stats[f] != state.str(f) {
				t.Errorf("bucket %s shows %q, API %q", f, stats[f], state.str(f))
			}
		}
		var points []struct{ Time, Event, Level string }
		tb.eval(`[...document.querySelectorAll('svg.chart circle.point')].map(c => ({Time: c.dataset.time, Event: c.dataset.event, Level: c.dataset.level}))`, &points)
		var hist struct {
			Items []struct{ ID, Time, Event, Amount string } `json:"items"`
		}
		if err := json.Unmarshal([]byte(a.expect("GET", "/v1/limits/team-spend/buckets/team%2Fa/history", "", 200).raw), &hist); err != nil {
			t.Fatal(err)
		}
		if len(points) != len(hist.Items) || len(points) != len(levels) {
			t.Fatalf("chart has %d points, history %d entries, %d charges: %+v", len(points), len(hist.Items), len(levels), points)
		}
		for i, p := range points {
			e := hist.Items[len(hist.Items)-1-i]
			if p.Time != e.Time || p.Event != e.Event || !decimal.RequireFromString(p.Level).Equal(decimal.RequireFromString(levels[i])) {
				t.Errorf("chart point %d = %+v; history %+v, level after it %s", i, p, e, levels[i])
			}
		}
		var capLine string
		tb.eval(`document.querySelector('svg.chart line.cap').dataset.level`, &capLine)
		if capLine != "100" {
			t.Errorf("capacity line at %q", capLine)
		}
		holdsAPI := a.expect("GET", "/v1/limits/team-spend/buckets/team%2Fa/reservations", "", 200)
		var holds struct {
			Items []struct{ ID, Amount string } `json:"items"`
		}
		_ = json.Unmarshal([]byte(holdsAPI.raw), &holds)
		hr := tb.rows("#holds")
		if len(holds.Items) != 1 || len(hr) != 1 || hr[0]["_"] != holds.Items[0].ID || hr[0]["amount"] != holds.Items[0].Amount {
			t.Errorf("holds shown %v, API %s", hr, holdsAPI.raw)
		}
		histRows := tb.rows("#history")
		if len(histRows) != len(hist.Items) {
			t.Fatalf("history rows %v", histRows)
		}
		for i, r := range histRows {
			if r["_"] != hist.Items[i].ID || r["event"] != hist.Items[i].Event || r["amount"] != hist.Items[i].Amount {
				t.Errorf("history row %d = %v, API %+v", i, r, hist.Items[i])
			}
		}
		var metaHeader bool
		tb.eval(`[...document.querySelectorAll('#history th')].some(th => th.textContent === 'meta')`, &metaHeader)
		if metaHeader {
			t.Error("a meta column without any meta")
		}
		tb.screenshot("dashboard-bucket")

		a.clock.Advance(time.Second)
		fresh := a.expect("POST", "/v1/limits/team-spend/buckets/team%2Fa/fillup", `{"cost":"3"}`, 200)
		tb.wait(`document.querySelectorAll('#history tbody tr').length === ` + jsonInt(len(hist.Items)+1) +
			` && document.querySelector('#bucket-stats [data-field=level]').textContent === ` + jsString(fresh.str("level")))

		// The xss key's own page.
		tb.open("#/l/team-spend/b/" + url.PathEscape(xssKey))
		tb.wait(`document.querySelector('#bucket-key')`)
		tb.eval(`({Scripts: document.scripts.length, Imgs: document.images.length, Flag: window.__xss ?? null,
			Text: document.querySelector('#bucket-key').textContent})`, &xss)
		if xss.Scripts != 1 || xss.Imgs != 0 || xss.Flag != nil || xss.Text != xssKey {
			t.Errorf("a key with markup was not rendered as text on its page: %+v", xss)
		}

		// A charge whose meta holds markup: the meta column appears without
		// a reload and shows the values as text.
		a.clock.Advance(time.Second)
		note := `<script>window.__xss=3</script><img src=x onerror="window.__xss=4">`
		body, _ := json.Marshal(map[string]any{"cost": "1", "meta": map[string]string{"order": "A-1042", "note": note}})
		a.expect("POST", "/v1/limits/team-spend/buckets/"+url.PathEscape(xssKey)+"/fillup", string(body), 200)
		tb.wait(`[...document.querySelectorAll('#history th')].some(th => th.textContent === 'meta')`)
		var mc struct {
			Scripts, Imgs int
			Flag          any
			Cell          string
		}
		tb.eval(`({Scripts: document.scripts.length, Imgs: document.images.length, Flag: window.__xss ?? null,
			Cell: document.querySelector('#history tbody tr td.meta').textContent})`, &mc)
		if mc.Scripts != 1 || mc.Imgs != 0 || mc.Flag != nil || mc.Cell != "note="+note+"order=A-1042" {
			t.Errorf("meta with markup was not rendered as text: %+v", mc)
		}
		tb.screenshot("dashboard-bucket-meta")
	})
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// testDashboardPhone checks that the pages fit a 390-pixel-wide screen: no
// sideways scrolling of the page (wide tables scroll inside their box).
func testDashboardPhone(t *testing.T, b context.Context) {
	a := newAPI(t)
	dashboardData(t, a)
	tb := openAPITab(t, b, a)
	tb.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(1), chromedp.EmulateMobile))
	for _, page := range []struct{ hash, ready, shot string }{
		{"", "#limits", "dashboard-phone-limits"},
		{"#/l/team-spend", "#buckets && #overview-note", "dashboard-phone-buckets"},
		{"#/l/team-spend/b/team%2Fa", "#history", "dashboard-phone-bucket"},
	} {
		tb.open(page.hash)
		var ready []string // every selector of page.ready, joined by " && "
		for _, sel := range strings.Split(page.ready, " && ") {
			ready = append(ready, `document.querySelector(`+jsString(sel)+`)`)
		}
		tb.wait(strings.Join(ready, " && "))
		var w struct{ Scroll, Inner int }
		tb.eval(`({Scroll: document.documentElement.scrollWidth, Inner: window.innerWidth})`, &w)
		if w.Scroll > w.Inner {
			t.Errorf("%s: page is %d px wide on a %d px screen", page.hash, w.Scroll, w.Inner)
		}
		tb.screenshot(page.shot)
	}
}

// testDashboardToken runs the dashboard with authentication on: it asks for
// a token, says clearly when one is refused, sends it as a bearer token and
// never puts it in a URL.
func testDashboardToken(t *testing.T, b context.Context) {
	const secret = "s3cret-token"
	clock := ledgertest.NewClock()
	store := memory.New(memory.WithClock(clock.Now))
	handler := budgethttp.New(ledger.NewService(store))
	var (
		mu   sync.Mutex
		seen []string // every request URL the browser made
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.String())
		mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/v1/") && r.Header.Get("Authorization") != "Bearer "+secret {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Unauthorized","status":401,"code":"unauthorized"}`))
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	a := &api{t: t, url: srv.URL, clock: clock, store: store}
	a.do("PUT", "/v1/limits/team-spend", `{"capacity":"100","leak":{"amount":"1","per":"1s"}}`, "Authorization", "Bearer "+secret)

	tb := openTab(t, b, srv.URL)
	tb.open("")
	tb.wait(`!document.querySelector('#auth').hidden`)
	var msg string
	tb.eval(`document.querySelector('#auth-msg').textContent`, &msg)
	if !strings.Contains(msg, "requires a bearer token") {
		t.Errorf("without a token the page says %q", msg)
	}
	tb.screenshot("dashboard-token")
	tb.do(chromedp.SendKeys(chromedp.CSS("#token"), "wrong"), chromedp.Click(chromedp.CSS(`#auth-form button`)))
	tb.wait(`document.querySelector('#auth-msg').textContent.includes('refused')`)
	tb.do(chromedp.SendKeys(chromedp.CSS("#token"), secret), chromedp.Click(chromedp.CSS(`#auth-form button`)))
	tb.wait(`document.querySelector('#limits tr[data-limit="team-spend"]') && document.querySelector('#auth').hidden`)
	var stored string
	tb.eval(`sessionStorage.getItem('budgetd.token')`, &stored)
	if stored != secret {
		t.Errorf("token kept as %q", stored)
	}
	loc, err := chromedp.Run(tb.ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	urls := append(slices.Clone(seen), loc)
	mu.Unlock()
	for _, u := range urls {
		if strings.Contains(u, secret) || strings.Contains(u, "wrong") {
			t.Errorf("a token in a URL: %s", u)
		}
	}
}

// testDashboardMeta gives history entries a meta object (as the API does for
// charges that carry one) and checks the history table's meta column: every
// key and value shown as text, markup included.
func testDashboardMeta(t *testing.T, b context.Context) {
	clock := ledgertest.NewClock()
	clock.Set(time.Now().Truncate(time.Second))
	store := memory.New(memory.WithClock(clock.Now))
	handler := budgethttp.New(ledger.NewService(store))
	meta := map[string]string{"order": "o-17", "note": `<script>window.__xss=3</script><b>bold</b>`}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/history") {
			handler.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, r)
		var page map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			t.Errorf("history answer: %v", err)
			return
		}
		items, _ := page["items"].([]any)
		for i, it := range items {
			if i%2 == 0 { // every other entry carries meta
				it.(map[string]any)["meta"] = meta
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(srv.Close)
	a := &api{t: t, url: srv.URL, clock: clock, store: store}
	a.limit("team-spend", "100", "1", "1s")
	for _, cost := range []string{"1", "2", "3"} {
		a.expect("POST", "/v1/limits/team-spend/buckets/k/fillup", `{"cost":"`+cost+`"}`, 200)
		clock.Advance(time.Second)
	}
	tb := openTab(t, b, srv.URL)
	tb.open("#/l/team-spend/b/k")
	tb.wait(`document.querySelector('#history td.meta')`)
	var got struct {
		Header  bool
		Cells   []string
		Scripts int
		Bold    int
		Flag    any
	}
	tb.eval(`({Header: [...document.querySelectorAll('#history th')].some(th => th.textContent === 'meta'),
		Cells: [...document.querySelectorAll('#history tbody td.meta')].map(td => td.textContent),
		Scripts: document.scripts.length, Bold: document.querySelectorAll('#history b').length, Flag: window.__xss ?? null})`, &got)
	want := []string{"note=" + meta["note"] + "order=o-17", "", "note=" + meta["note"] + "order=o-17"}
	if !got.Header || !slices.Equal(got.Cells, want) || got.Scripts != 1 || got.Bold != 0 || got.Flag != nil {
		t.Errorf("meta column: %+v, want cells %q", got, want)
	}
}

// countsShown is true once the limits page shows every limit's bucket count
// (it reads them in the background: "…" until then).
const countsShown = `![...document.querySelectorAll('#limits td[data-field="buckets"]')].some(td => td.textContent === "…")`

// testDashboardPager pages through a limit's buckets with the page's
// buttons: 50 to a page, in the API's key order.
func testDashboardPager(t *testing.T, b context.Context) {
	a := newAPI(t)
	a.limit("wide", "100", "1", "1h")
	var keys []string
	for i := range 55 {
		k := "tenant-" + jsonInt(100+i)
		keys = append(keys, k)
		a.expect("POST", "/v1/limits/wide/buckets/"+k+"/fillup", `{"cost":"`+jsonInt(1+i%7)+`"}`, 200)
	}
	tb := openAPITab(t, b, a)
	tb.open("#/l/wide")
	tb.wait(`document.querySelectorAll('#buckets tbody tr').length === 50`)
	first := tb.rows("#buckets")
	tb.click("#next-page")
	tb.wait(`document.querySelectorAll('#buckets tbody tr').length === 5`)
	second := tb.rows("#buckets")
	var got []string
	for _, r := range append(first, second...) {
		got = append(got, r["_"])
	}
	sort.Strings(got)
	if !slices.Equal(got, keys) {
		t.Errorf("two pages show %q, want %q", got, keys)
	}
	var lastPage []string
	for _, r := range second {
		lastPage = append(lastPage, r["_"])
	}
	sort.Strings(lastPage)
	if !slices.Equal(lastPage, keys[50:]) {
		t.Errorf("second page %q, want the last keys %q", lastPage, keys[50:])
	}
	tb.click(".pager button")
	tb.wait(`document.querySelectorAll('#buckets tbody tr').length === 50`)

	// The limits page counts a limit's buckets exactly, past the 100 that a
	// page of the list holds too.
	a.limit("many", "100", "1", "1h")
	for i := range 105 {
		a.expect("POST", "/v1/limits/many/buckets/m"+jsonInt(i)+"/fillup", `{"cost":"1"}`, 200)
	}
	tb.open("")
	tb.wait(`document.querySelector('#limits tr[data-limit="many"]') && ` + countsShown)
	var titles []string
	tb.eval(`[...document.querySelectorAll('#limits td[data-field="buckets"]')].map(td => td.title)`, &titles)
	for _, r := range tb.rows("#limits") {
		if w := map[string]string{"many": "105", "wide": "55"}[r["_"]]; r["buckets"] != w {
			t.Errorf("limits page: %s has %q buckets, want %s", r["_"], r["buckets"], w)
		}
	}
	for _, title := range titles {
		if !strings.HasPrefix(title, "exact, counted by budgetd at ") {
			t.Errorf("bucket count title %q, want it to say the count is exact and when it was made", title)
		}
	}
}
