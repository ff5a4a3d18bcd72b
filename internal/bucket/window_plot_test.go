package bucket

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/calendar"
)

// windowPlotPath is the figure of docs/windows.md.
const windowPlotPath = "../../docs/windows.svg"

// TestWindowPlot draws docs/windows.svg with the rule itself: a card that
// tries to spend 1,000 every day at noon against "10,000 in 30 days" as a
// leaky bucket (10,000 per 720h), a calendar month and a rolling window of
// 720h in hourly slots, with the most each accepted in any 30 days. The
// figure in the repository must be what the rule draws; set
// BUDGETD_WRITE_PLOT=1 to redraw it.
func TestWindowPlot(t *testing.T) {
	svg, most := windowPlot()
	if most[2] > 10000 {
		t.Fatalf("the window accepted %.0f in 30 days", most[2])
	}
	if most[0] <= 10000 {
		t.Fatalf("the leak accepted only %.0f in 30 days: the figure shows nothing", most[0])
	}
	if os.Getenv("BUDGETD_WRITE_PLOT") == "1" {
		if err := os.WriteFile(windowPlotPath, svg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(windowPlotPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, svg) {
		t.Fatalf("%s is not what the rule draws; run BUDGETD_WRITE_PLOT=1 go test -run TestWindowPlot ./internal/bucket/", windowPlotPath)
	}
}

// windowPlot returns the figure and, per series, the most accepted in any
// span of 30 days.
func windowPlot() ([]byte, []float64) {
	limits := []Limit{
		{Capacity: d("10000"), LeakAmount: d("10000"), LeakPer: 720 * time.Hour},
		{Capacity: d("10000"), Period: &calendar.Period{Every: calendar.Month, Zone: time.UTC, StartDay: 1}},
		{Capacity: d("10000"), Window: &Window{Length: 720 * time.Hour, Precision: time.Hour}},
	}
	names := []string{"leak 10,000 per 720h", "period: month", "window: 720h in slots of 1h"}
	colors := []string{"#d95f02", "#1b9e77", "#7570b3"}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	f := plotFrame{w: 720, h: 350, left: 56, top: 20, right: 10, bottom: 78, from: from, to: to, max: 12000}
	x, y := f.x, f.y
	var b bytes.Buffer
	f.head(&b, 2000, 10000)
	most := make([]float64, len(limits))
	for i, l := range limits {
		var s State
		var accepted []time.Time
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="`, colors[i])
		for at := from; at.Before(to); at = at.Add(time.Hour) {
			if at.Hour() == 12 {
				var dec Decision
				if dec, s = Fillup(l, s, at, d("1000")); dec.Accepted {
					accepted = append(accepted, at)
				}
			}
			lvl, _ := LevelAt(l, s, at).Decimal().Float64()
			if at != from {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", x(at), y(lvl))
		}
		b.WriteString("\"/>\n")
		for j, a := range accepted {
			n := 0
			for _, o := range accepted[j:] {
				if o.Sub(a) < 720*time.Hour {
					n++
				}
			}
			most[i] = max(most[i], float64(n)*1000)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s: accepted %d × 1,000 in 90 days, at most %.0f in any 30 days</text>`+"\n",
			f.left+8, f.h-f.bottom+30+14*float64(i), colors[i], names[i], len(accepted), most[i])
	}
	b.WriteString("</svg>\n")
	return b.Bytes(), most
}
