package http_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/chromedp/chromedp"
	"github.com/shopspring/decimal"
)

// The operator's view (issue 47): a limit's page shows who is near the cap
// (the buckets past each threshold, the top spenders, the counts of
// buckets and active holds) and a periodic bucket's page its current
// period against an even pace, with times in the viewer's own zone and
// amounts in the viewer's own number format, exactly.

// widths are the screens the overview is checked on: a desktop and a phone.
var widths = []struct {
	name          string
	width, height int64
	phone         bool
}{{"1400px", 1400, 900, false}, {"390px", 390, 844, true}}

// Pinned instants of the overview data: a monthly cap in Berlin, read on
// April 10th, with the reset at May 1st 00:00 in Berlin.
var (
	overviewNow   = time.Date(2026, 4, 10, 11, 59, 30, 0, time.UTC)
	overviewStart = time.Date(2026, 3, 31, 22, 0, 0, 0, time.UTC)
	overviewReset = time.Date(2026, 4, 30, 22, 0, 0, 0, time.UTC)
)

// overviewData makes the limit "monthly" (capacity 1000, thresholds 50%
// and 90%) with five buckets, three active holds on two of them, and pins
// the clock at overviewNow. Used (level + held): acme 990.5, globex 600,
// umbrella 150, initech 120.25, and a key with markup 10.
func overviewData(t *testing.T, a *api) {
	t.Helper()
	a.clock.Set(time.Date(2026, 4, 2, 10, 0, 0, 0, time.UTC))
	a.expect("PUT", "/v1/limits/monthly", `{"capacity":"1000","period":{"every":"month","tz":"Europe/Berlin"},"history":true,"thresholds":["50%","90%"]}`, 200)
	b := func(key string) string { return "/v1/limits/monthly/buckets/" + url.PathEscape(key) }
	for _, c := range []struct {
		key, cost string
	}{{"acme", "950.5"}, {"globex", "600"}, {"initech", "120.25"}, {"umbrella", "30"}, {"<b>wayne</b>", "10"}} {
		a.expect("POST", b(c.key)+"/fillup", `{"cost":"`+c.cost+`"}`, 200)
		a.clock.Advance(20 * time.Hour)
	}
	a.clock.Set(overviewNow.Add(-time.Hour))
	a.expect("POST", b("acme")+"/reservations", `{"amount":"40","ttl":"2h"}`, 201)
	a.expect("POST", b("umbrella")+"/reservations", `{"amount":"100","ttl":"2h"}`, 201)
	a.expect("POST", b("umbrella")+"/reservations", `{"amount":"20","ttl":"2h"}`, 201)
	a.clock.Set(overviewNow)
}

// enUS writes a decimal string as an en-US browser formats it: the
// integer part grouped by threes with commas, the fraction as it is.
func enUS(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	intPart, frac, hasFrac := strings.Cut(s, ".")
	var b strings.Builder
	for i, r := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if hasFrac {
		return sign + b.String() + "." + frac
	}
	return sign + b.String()
}

// spaces replaces the no-break spaces ICU puts in dates ("06:00 PM")
// with plain ones.
func spaces(s string) string { return strings.NewReplacer("\u202f", " ", "\u00a0", " ").Replace(s) }

// listKeys is the keys of a bucket listing of the API, in its order.
func listKeys(t *testing.T, a *api, query string) []string {
	t.Helper()
	var page listed
	if err := json.Unmarshal([]byte(a.expect("GET", "/v1/limits/monthly/buckets?"+query, "", 200).raw), &page); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, it := range page.Items {
		keys = append(keys, it.Key)
	}
	return keys
}

// units is an amount in units of 10^-12, as the page computes in BigInt.
func units(s string) *big.Int {
	d := decimal.RequireFromString(s).Shift(12)
	return d.BigInt()
}

func fromUnitsGo(u *big.Int) string { return decimal.NewFromBigInt(u, -12).String() }

// TestDashboardOverview opens a limit's page and a periodic bucket's page
// on every store, at 1400 and 390 pixels, in a browser whose own zone is
// New York (TZ), and checks what they show against the API.
func TestDashboardOverview(t *testing.T) {
	b := browser(t, chromedp.Env("TZ=America/New_York"))
	eachStore(t, func(t *testing.T, a *api) {
		overviewData(t, a)
		above := map[string][]string{"50%": listKeys(t, a, "above=50%25"), "90%": listKeys(t, a, "above=90%25")}
		top := listKeys(t, a, "order=used&limit=10")
		if strings.Join(above["90%"], ",") != "acme" || strings.Join(above["50%"], ",") != "acme,globex" ||
			strings.Join(top, ",") != "acme,globex,umbrella,initech,<b>wayne</b>" {
			t.Fatalf("the API lists past 50%% %q, past 90%% %q, top %q", above["50%"], above["90%"], top)
		}
		tb := openAPITab(t, b, a)
		for _, w := range widths {
			t.Run(w.name, func(t *testing.T) {
				vp := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
				if w.phone {
					vp = append(vp, chromedp.EmulateMobile)
				}
				tb.do(chromedp.EmulateViewport(w.width, w.height, vp...))
				checkLimitOverview(t, tb, a, above, top)
				noSideways(t, tb, w.width)
				tb.screenshot(map[bool]string{false: "dashboard-limit-overview", true: "dashboard-phone-limit-overview"}[w.phone])
				checkBucketPeriod(t, tb, a)
				checkEventTimes(t, tb, a)
				noSideways(t, tb, w.width)
				tb.scrollTo("#this-period")
				tb.screenshot(map[bool]string{false: "dashboard-bucket-period", true: "dashboard-phone-bucket-period"}[w.phone])
			})
		}
	})
}

// noSideways fails when the page is wider than the screen.
func noSideways(t *testing.T, tb *tab, width int64) {
	t.Helper()
	var w struct{ Scroll, Inner int64 }
	tb.eval(`({Scroll: document.documentElement.scrollWidth, Inner: window.innerWidth})`, &w)
	if w.Inner != width || w.Scroll > w.Inner {
		t.Errorf("page is %d px wide on a %d px screen (want %d)", w.Scroll, w.Inner, width)
	}
}

// checkLimitOverview: the buckets past each threshold are those the API
// lists (fullest first), the top spenders are in the API's order with
// acme first, the counts are 5 buckets and 3 holds, amounts are in en-US
// format with the exact value in the title, and a key with markup is text.
func checkLimitOverview(t *testing.T, tb *tab, a *api, above map[string][]string, top []string) {
	t.Helper()
	tb.open("#/l/monthly")
	tb.wait(`document.querySelectorAll('#top tbody tr').length === 5 && (document.querySelector('#limit-stats [data-field=hold_count]')?.textContent ?? "…") !== "…"`)
	for th, keys := range above {
		var shown []string
		tb.eval(`[...document.querySelectorAll('section.near[data-threshold="`+th+`"] tbody tr')].map(r => r.dataset.key)`, &shown)
		var heading string
		tb.eval(`document.querySelector('section.near[data-threshold="`+th+`"] h3').textContent`, &heading)
		if !slices.Equal(shown, keys) || heading != "Past "+th+" ("+jsonInt(len(keys))+")" {
			t.Errorf("past %s: the page lists %q under %q, the API %q", th, shown, heading, keys)
		}
	}
	rows := tb.rows("#top")
	var keys []string
	for _, r := range rows {
		keys = append(keys, r["_"])
	}
	if !slices.Equal(keys, top) || rows[0]["rank"] != "1" || rows[0]["link"] != "acme" {
		t.Errorf("top spenders %q, the API ranks %q", keys, top)
	}
	// Each row's used is level + held from the API, in en-US format.
	var list listed
	if err := json.Unmarshal([]byte(a.expect("GET", "/v1/limits/monthly/buckets?order=used", "", 200).raw), &list); err != nil {
		t.Fatal(err)
	}
	for i, it := range list.Items {
		used := decimal.RequireFromString(it.Level).Add(decimal.RequireFromString(it.Held)).String()
		if rows[i]["used"] != enUS(used) || rows[i]["capacity"] != "1,000" {
			t.Errorf("top row %d = %v, API used %s of %s", i, rows[i], used, it.Capacity)
		}
	}
	if rows[0]["used"] != "990.5" || rows[0]["share"] != "99.1%" || rows[3]["share"] != "12.0%" {
		t.Errorf("acme's row %v, initech's %v: want used 990.5, 99.1%% and 12.0%%", rows[0], rows[3])
	}
	var page struct {
		Stats       map[string]string
		CapTitle    string
		Bold        int
		Wayne, Flag any
	}
	tb.eval(`({Stats: Object.fromEntries([...document.querySelectorAll('#limit-stats dd')].map(d => [d.dataset.field, d.textContent])),
		CapTitle: document.querySelector('#limit-stats [data-field=capacity]').parentElement.title,
		Bold: document.querySelectorAll('#main b').length,
		Wayne: document.querySelector('#top tr[data-key="<b>wayne</b>"] a')?.textContent ?? null, Flag: window.__xss ?? null})`, &page)
	if page.Stats["bucket_count"] != "5" || page.Stats["hold_count"] != "3" {
		t.Errorf("counts: %v, want 5 buckets and 3 holds", page.Stats)
	}
	if page.Stats["capacity"] != "1,000" || page.CapTitle != "1000" || page.Bold != 0 || page.Wayne != "<b>wayne</b>" {
		t.Errorf("limit page %+v", page)
	}
	if r := spaces(page.Stats["resets_at"]); r != "Apr 30, 2026, 06:00 PM EDT · May 1, 2026, 12:00 AM Europe/Berlin" {
		t.Errorf("the limit page shows the reset as %q", r)
	}
	// The counts are budgetd's exact ones (GET …/counts), and say when
	// they were counted; each bucket's last update is in New York time with
	// Berlin's beside it.
	counts := a.expect("GET", "/v1/limits/monthly/counts", "", 200)
	var countTitles []string
	tb.eval(`['bucket_count', 'hold_count'].map(f => document.querySelector('#limit-stats [data-field=' + f + ']').parentElement.title)`, &countTitles)
	wantTitle := "exact, counted by budgetd at " + zoned(t, counts.str("at"))
	if counts.body["buckets"] != 5.0 || counts.body["active_holds"] != 3.0 || counts.str("at") != "2026-04-10T11:59:30.000000Z" || len(countTitles) != 2 ||
		spaces(countTitles[0]) != wantTitle || spaces(countTitles[1]) != wantTitle {
		t.Errorf("counts titled %q, want %q; the API counts %s", countTitles, wantTitle, counts.raw)
	}
	var updated struct {
		Items []struct {
			Key       string `json:"key"`
			UpdatedAt string `json:"updated_at"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(a.expect("GET", "/v1/limits/monthly/buckets", "", 200).raw), &updated); err != nil {
		t.Fatal(err)
	}
	shown := map[string]string{}
	for _, r := range tb.rows("#buckets") {
		shown[r["_"]] = spaces(r["updated_at"])
	}
	for _, it := range updated.Items {
		if shown[it.Key] != zoned(t, it.UpdatedAt) {
			t.Errorf("%s updated at %s shows as %q, want %q", it.Key, it.UpdatedAt, shown[it.Key], zoned(t, it.UpdatedAt))
		}
	}
}

// zoned is an API time as the dashboard in New York shows a time of the
// monthly limit (Berlin) to the second: in the viewer's zone with its short
// name, then in Berlin's.
func zoned(t *testing.T, iso string) string {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, iso)
	ny, err1 := time.LoadLocation("America/New_York")
	berlin, err2 := time.LoadLocation("Europe/Berlin")
	if err != nil || err1 != nil || err2 != nil {
		t.Fatalf("zoned(%q): %v %v %v", iso, err, err1, err2)
	}
	const layout = "Jan 2, 2006, 03:04:05 PM"
	return at.In(ny).Format(layout+" MST") + " · " + at.In(berlin).Format(layout) + " Europe/Berlin"
}

// checkEventTimes: acme's page shows the times of its history entries,
// holds, threshold events and last update as zoned says, with the exact
// time in the title, and none as budgetd writes it.
func checkEventTimes(t *testing.T, tb *tab, a *api) {
	t.Helper()
	path := "/v1/limits/monthly/buckets/acme"
	// In the page's order: the last update, the holds, the events, the
	// history.
	apiTimes := []string{a.expect("GET", path, "", 200).str("updated_at")}
	for _, part := range []struct{ path, fields string }{{"/reservations", "created_at expires_at"}, {"/events", "time"}, {"/history", "time"}} {
		var list struct{ Items []map[string]any }
		if err := json.Unmarshal([]byte(a.expect("GET", path+part.path, "", 200).raw), &list); err != nil {
			t.Fatal(err)
		}
		for _, it := range list.Items {
			for _, f := range strings.Fields(part.fields) {
				apiTimes = append(apiTimes, it[f].(string))
			}
		}
	}
	var shown []struct{ Text, Title string }
	tb.eval(`[...document.querySelectorAll('#history [data-field=time], #holds [data-field=created_at], #holds [data-field=expires_at], #events [data-field=time], #bucket-stats [data-field=updated_at]')]
		.map(td => ({Text: td.textContent, Title: td.querySelector('.when')?.title ?? ""}))`, &shown)
	if len(shown) != len(apiTimes) || len(apiTimes) < 6 {
		t.Fatalf("the page shows %d times, the API has %d: %+v", len(shown), len(apiTimes), shown)
	}
	for i, iso := range apiTimes {
		if spaces(shown[i].Text) != zoned(t, iso) || shown[i].Title != iso {
			t.Errorf("time %d (%s) shows as %+v, want %q", i, iso, shown[i], zoned(t, iso))
		}
	}
}

// checkBucketPeriod: acme's page shows its period in New York time with
// Berlin's beside it, the countdown to the reset by budgetd's clock, the
// even pace now and the pace line from 0 at the period start to the
// capacity at the reset, and the projection at the pace so far, all
// computed exactly as in Go here.
func checkBucketPeriod(t *testing.T, tb *tab, a *api) {
	t.Helper()
	path := "/v1/limits/monthly/buckets/acme"
	state := a.expect("GET", path, "", 200)
	if state.str("period_start") != "2026-03-31T22:00:00.000000Z" || state.str("resets_at") != "2026-04-30T22:00:00.000000Z" {
		t.Fatalf("acme: %s", state.raw)
	}
	tb.open("#/l/monthly/b/acme")
	tb.wait(`document.querySelector('#burndown line.pace') && document.querySelector('#history')`)
	var got struct {
		Stats                    map[string]string
		Titles                   map[string]string
		Pace                     map[string]string
		Cap, Left, Right         string
		Now, NowLevel, Projected string
		Points                   int
		Projection, Zone, Resets string
		Ticks                    []string
	}
	tb.eval(`(() => { const q = (s) => document.querySelector(s), svg = q('#burndown'), pace = q('#burndown line.pace');
		return {Stats: Object.fromEntries([...document.querySelectorAll('#period-stats dd')].map(d => [d.dataset.field, d.textContent])),
			Titles: Object.fromEntries([...document.querySelectorAll('#period-stats dd')].map(d => [d.dataset.field, d.parentElement.title])),
			Pace: Object.fromEntries(['x1', 'y1', 'x2', 'y2', 'data-from', 'data-to', 'data-level'].map(k => [k, pace.getAttribute(k)])),
			Cap: q('#burndown line.cap').getAttribute('y1'), Left: "64", Right: "788",
			Now: q('#burndown line.now').dataset.time, NowLevel: q('#burndown circle.now-point').dataset.level,
			Projected: q('#burndown line.projection')?.dataset.level ?? "",
			Points: +(q('#burndown path.level')?.dataset.points ?? 0),
			Projection: q('#projection')?.textContent ?? "", Zone: q('#burndown text.zone').textContent,
			Resets: q('#bucket-stats [data-field=resets_at]').textContent,
			Ticks: [...svg.querySelectorAll('text.tick')].map(t => t.textContent)}; })()`, &got)
	want := map[string]string{
		"period_start": "Mar 31, 2026, 06:00 PM EDT · Apr 1, 2026, 12:00 AM Europe/Berlin",
		"resets_at":    "Apr 30, 2026, 06:00 PM EDT · May 1, 2026, 12:00 AM Europe/Berlin",
		// 20 days 10 hours and 30 seconds before the reset, by the store's clock.
		"countdown": "20d 10h 0m",
		"used":      "990.5",
	}
	for f, w := range want {
		if spaces(got.Stats[f]) != w {
			t.Errorf("period %s shows %q, want %q", f, got.Stats[f], w)
		}
	}
	if spaces(got.Resets) != want["resets_at"] {
		t.Errorf("the bucket's reset shows as %q", got.Resets)
	}
	// Even pace now: capacity × elapsed ÷ period, in units, rounded down.
	elapsed := big.NewInt(overviewNow.Sub(overviewStart).Microseconds())
	length := big.NewInt(overviewReset.Sub(overviewStart).Microseconds())
	even := new(big.Int).Quo(new(big.Int).Mul(units("1000"), elapsed), length)
	if got.Titles["pace"] != fromUnitsGo(even) || got.Stats["pace"] != enUS(decimal.NewFromBigInt(even, -12).Round(2).String()) {
		t.Errorf("even pace shown %q (exact %q), want %s", got.Stats["pace"], got.Titles["pace"], fromUnitsGo(even))
	}
	// The pace line runs from 0 at the period start (left edge) to the
	// capacity at the reset (right edge, at the capacity line's height).
	p := got.Pace
	if p["x1"] != got.Left || p["x2"] != got.Right || p["y2"] != got.Cap || p["data-from"] != state.str("period_start") ||
		p["data-to"] != state.str("resets_at") || p["data-level"] != "1000" || p["y1"] != "186.00" {
		t.Errorf("pace line %v, capacity line at y %s", p, got.Cap)
	}
	series, _ := a.levels(path + "/levels?points=2")
	used := units("990.5")
	projected := new(big.Int).Quo(new(big.Int).Mul(used, length), elapsed)
	if got.Now != series.To || got.NowLevel != "990.5" || got.Projected != fromUnitsGo(projected) || got.Points < 4 {
		t.Errorf("burn-down: now %s at %s (want %s at 990.5), projected %s (want %s), %d points", got.Now, got.NowLevel,
			series.To, got.Projected, fromUnitsGo(projected), got.Points)
	}
	// It would reach the capacity at start + elapsed × 1000 ÷ 990.5.
	capAt := new(big.Int).Quo(new(big.Int).Mul(elapsed, units("1000")), used)
	at := overviewStart.Add(time.Duration(capAt.Int64()) * time.Microsecond).In(mustZone(t, "America/New_York"))
	if p := spaces(got.Projection); !strings.Contains(p, "would reach its capacity at "+at.Format("Jan 2, 2006, 03:04 PM MST")) {
		t.Errorf("projection %q, want the capacity reached at %s", p, at)
	}
	if got.Zone != "America/New_York" || len(got.Ticks) < 4 || len(got.Ticks) > 9 || got.Ticks[0] != "Apr 1" {
		t.Errorf("axis in the viewer's zone: %q, ticks %q", got.Zone, got.Ticks)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestDashboardNumbers: in a German browser, amounts use its separators
// and keep every digit, past what a float holds (999,999,999,999.999999
// has 18 significant digits), on the limit's page and the bucket's.
func TestDashboardNumbers(t *testing.T) {
	b := browser(t, chromedp.Env("TZ=Europe/Berlin"))
	a := newAPI(t)
	a.clock.Set(time.Date(2026, 4, 10, 12, 0, 0, 0, time.UTC))
	const huge = "999999999999.999999"
	a.expect("PUT", "/v1/limits/big", `{"capacity":"`+huge+`","period":{"every":"month","tz":"UTC"},"history":true}`, 200)
	a.expect("POST", "/v1/limits/big/buckets/whale/fillup", `{"cost":"`+huge+`"}`, 200)
	a.expect("POST", "/v1/limits/big/buckets/minnow/fillup", `{"cost":"1234.5"}`, 200)
	tb := openAPITab(t, b, a)
	// Debian's chromium ships the en-US locale only (chromium-l10n has the
	// others), so the tab is told its locale as DevTools does: ICU's
	// default, which Intl formats with, becomes de-DE.
	tb.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		return t.Call(ctx, "Emulation.setLocaleOverride", map[string]string{"locale": "de-DE"}, nil)
	}))
	tb.open("#/l/big")
	tb.wait(`document.querySelectorAll('#top tbody tr').length === 2`)
	var lang string
	tb.eval(`Intl.NumberFormat().resolvedOptions().locale`, &lang)
	rows := tb.rows("#top")
	if rows[0]["_"] != "whale" || rows[0]["used"] != "999.999.999.999,999999" || rows[1]["used"] != "1.234,5" ||
		rows[0]["capacity"] != "999.999.999.999,999999" || spaces(rows[0]["share"]) != "100,0 %" {
		t.Errorf("in %s the top spenders show %v", lang, rows)
	}
	tb.open("#/l/big/b/whale")
	tb.wait(`document.querySelector('#period-stats')`)
	var stats map[string]string
	tb.eval(`Object.fromEntries([...document.querySelectorAll('#bucket-stats dd')].map(d => [d.dataset.field, d.textContent]))`, &stats)
	if stats["level"] != "999.999.999.999,999999" || stats["capacity"] != "999.999.999.999,999999" || stats["remaining"] != "0" {
		t.Errorf("in %s the bucket shows %v", lang, stats)
	}
	// The reset at 00:00 UTC on May 1st is 02:00 in Berlin, the viewer's zone.
	var reset string
	tb.eval(`document.querySelector('#period-stats [data-field=resets_at] time').textContent`, &reset)
	if !strings.Contains(spaces(reset), "1. Mai 2026, 02:00") {
		t.Errorf("in %s the reset shows as %q", lang, reset)
	}
}

// TestDashboardExactCounts: past what one listing holds (1,000 buckets)
// and past 50 buckets with holds, the limit's page shows budgetd's exact
// counts (GET …/counts): 1,001 buckets and 52 active holds, an expired
// one not counted, where a count from listings could give only lower
// bounds.
func TestDashboardExactCounts(t *testing.T) {
	b := browser(t)
	a := newAPI(t)
	a.limit("big", "100", "1", "1h")
	svc := ledger.NewService(a.store)
	ctx := context.Background()
	for i := range 1001 {
		ref := ledger.BucketRef{Limit: "big", Key: fmt.Sprintf("k%04d", i)}
		if _, err := svc.Fillup(ctx, []ledger.Item{{Bucket: ref, Cost: decimal.NewFromInt(1)}}, ledger.Idempotency{}); err != nil {
			t.Fatal(err)
		}
		holds := 0 // k0000 has two holds, k0001 to k0050 one each
		switch {
		case i == 0:
			holds = 2
		case i <= 50:
			holds = 1
		}
		for range holds {
			if _, err := svc.Reserve(ctx, ref, decimal.NewFromInt(1), time.Hour, ledger.Idempotency{}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := svc.Reserve(ctx, ledger.BucketRef{Limit: "big", Key: "k0999"}, decimal.NewFromInt(1), time.Second, ledger.Idempotency{}, nil); err != nil {
		t.Fatal(err)
	}
	a.clock.Advance(time.Second) // k0999's hold expires
	tb := openAPITab(t, b, a)
	tb.open("#/l/big")
	tb.wait(`(document.querySelector('#limit-stats [data-field=hold_count]')?.textContent ?? "…") !== "…"`)
	var got map[string]string
	tb.eval(`Object.fromEntries(['bucket_count', 'hold_count'].map(f => [f, document.querySelector('#limit-stats [data-field=' + f + ']').textContent]))`, &got)
	if got["bucket_count"] != "1,001" || got["hold_count"] != "52" {
		t.Errorf("counts %v, want 1,001 buckets and 52 active holds", got)
	}
}
