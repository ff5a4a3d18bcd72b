package bucket

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/calendar"
)

// plotPath is the figure of docs/periods.md.
const plotPath = "../../docs/periods.svg"

// TestPeriodPlot draws docs/periods.svg with the rule itself: a team that
// tries to spend 250 every day at noon against a cap of 5,000, as a leaky
// bucket (5,000 per 720h) and as a calendar month in Europe/Berlin. The
// figure in the repository must be what the rule draws; set
// BUDGETD_WRITE_PLOT=1 to redraw it.
func TestPeriodPlot(t *testing.T) {
	svg := periodPlot(t)
	if os.Getenv("BUDGETD_WRITE_PLOT") == "1" {
		if err := os.WriteFile(plotPath, svg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(plotPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, svg) {
		t.Fatalf("%s is not what the rule draws; run BUDGETD_WRITE_PLOT=1 go test -run TestPeriodPlot ./internal/bucket/", plotPath)
	}
}

func periodPlot(t *testing.T) []byte {
	loc, err := calendar.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	leaky := Limit{Capacity: d("5000"), LeakAmount: d("5000"), LeakPer: 720 * time.Hour}
	monthly := Limit{Capacity: d("5000"), Period: &calendar.Period{Every: calendar.Month, Zone: loc, StartDay: 1}}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
	to := time.Date(2026, 4, 1, 0, 0, 0, 0, loc)
	const w, h, left, top, right, bottom = 720.0, 330.0, 50.0, 20.0, 10.0, 64.0
	x := func(at time.Time) float64 {
		return left + (w-left-right)*at.Sub(from).Hours()/to.Sub(from).Hours()
	}
	y := func(level float64) float64 { return top + (h-top-bottom)*(1-level/6000) }
	type series struct {
		l      Limit
		s      State
		points []string
		spent  map[time.Month]float64
	}
	all := []*series{{l: leaky, spent: map[time.Month]float64{}}, {l: monthly, spent: map[time.Month]float64{}}}
	for at := from; at.Before(to); at = at.Add(time.Hour) {
		for _, sr := range all {
			if at.Hour() == 12 {
				var dec Decision
				dec, sr.s = Fillup(sr.l, sr.s, at, d("250"))
				if dec.Accepted {
					sr.spent[at.Month()] += 250
				}
			}
			lvl, _ := LevelAt(sr.l, sr.s, at).Decimal().Float64()
			sr.points = append(sr.points, fmt.Sprintf("%.1f,%.1f", x(at), y(lvl)))
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for _, lvl := range []float64{0, 1000, 2000, 3000, 4000, 5000, 6000} {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
			left, y(lvl), w-right, y(lvl), left-4, y(lvl)+4, lvl)
	}
	for m := from; !m.After(to); m = m.AddDate(0, 1, 0) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			x(m), top, x(m), h-bottom, x(m), h-bottom+14, m.Format("2 Jan"))
	}
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", left, y(5000), w-right, y(5000))
	colors := []string{"#d95f02", "#1b9e77"}
	names := []string{"leak 5000 per 720h", "period: month, Europe/Berlin"}
	for i, sr := range all {
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="`, colors[i])
		for j, p := range sr.points {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(p)
		}
		b.WriteString("\"/>\n")
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s: charged %.0f in January, %.0f in February, %.0f in March</text>`+"\n",
			left+8, h-bottom+30+14*float64(i), colors[i], names[i], sr.spent[time.January], sr.spent[time.February], sr.spent[time.March])
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}
