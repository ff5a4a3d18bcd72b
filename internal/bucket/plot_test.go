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

// plotFrame is the frame of the figures the rule draws: a w × h picture
// with margins, time from from to to across (a line at each month's start)
// and levels from 0 to max up.
type plotFrame struct {
	w, h, left, top, right, bottom float64
	from, to                       time.Time
	max                            float64
}

func (f plotFrame) x(at time.Time) float64 {
	return f.left + (f.w-f.left-f.right)*at.Sub(f.from).Hours()/f.to.Sub(f.from).Hours()
}

func (f plotFrame) y(level float64) float64 { return f.top + (f.h-f.top-f.bottom)*(1-level/f.max) }

// head writes the picture's start: the background, a grid line every step
// of level, the months and the capacity as a dashed line.
func (f plotFrame) head(b *bytes.Buffer, step, capacity float64) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", f.w, f.h, f.w, f.h)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for lvl := 0.0; lvl <= f.max; lvl += step {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
			f.left, f.y(lvl), f.w-f.right, f.y(lvl), f.left-4, f.y(lvl)+4, lvl)
	}
	for m := f.from; !m.After(f.to); m = m.AddDate(0, 1, 0) {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			f.x(m), f.top, f.x(m), f.h-f.bottom, f.x(m), f.h-f.bottom+14, m.Format("2 Jan"))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", f.left, f.y(capacity), f.w-f.right, f.y(capacity))
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
	f := plotFrame{w: 720, h: 330, left: 50, top: 20, right: 10, bottom: 64, from: from, to: to, max: 6000}
	x, y := f.x, f.y
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
	f.head(&b, 1000, 5000)
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
			f.left+8, f.h-f.bottom+30+14*float64(i), colors[i], names[i], sr.spent[time.January], sr.spent[time.February], sr.spent[time.March])
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}
