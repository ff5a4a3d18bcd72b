package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/api"
)

// TestCLILimitsKeepWhatTheyDoNotName follows the README in order: the
// monthly cap gets thresholds and rollover through the API, then the CLI's
// limits put of the README would drop them; it refuses and names them.
// limits set changes only what it names; limits get shows every field; put
// --replace replaces the whole limit.
func TestCLILimitsKeepWhatTheyDoNotName(t *testing.T) {
	server := startBudgetd(t)
	expect := cliExpect(t, server)
	req, _ := http.NewRequest(http.MethodPut, server+"/v1/limits/team-spend", strings.NewReader(
		`{"capacity":"5000.00","period":{"every":"month","tz":"Europe/Berlin"},"thresholds":["50%","80%"],"rollover":{"max":"1000.00"},"record_denials":true,"mode":"soft","grace":"10%"}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %v %v", err, res)
	}
	res.Body.Close()
	get := func() api.Limit {
		t.Helper()
		var l api.Limit
		if err := json.Unmarshal([]byte(expect(0, "", "limits", "get", "team-spend", "--json")), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	kept := func(what string, capacity string) {
		t.Helper()
		l := get()
		if l.Capacity.String() != capacity || !slices.Equal(l.Thresholds, []string{"50%", "80%"}) || l.Rollover == nil || l.Rollover.Max.String() != "1000" ||
			!l.RecordDenials || l.Mode != api.ModeSoft || l.Grace == nil || l.Grace.String() != "10%" || l.Period.TZ != "Europe/Berlin" {
			b, _ := json.Marshal(l)
			t.Fatalf("%s: the limit is now %s", what, b)
		}
	}

	// The README's put names none of them: refused, each named, nothing written.
	out := expect(2, "would drop", "limits", "put", "team-spend", "--capacity", "5000.00", "--period", "month", "--tz", "Europe/Berlin")
	for _, want := range []string{"thresholds 50%, 80%", "rollover up to 1000", "mode soft with grace 10%", "record_denials", "limits set team-spend", "--replace"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not name %q:\n%s", want, out)
		}
	}
	kept("after the refused put", "5000")
	// Naming the zone only is still a loss of the zone.
	expect(2, "time zone Europe/Berlin", "limits", "put", "team-spend", "--capacity", "5000", "--period", "month",
		"--threshold", "50%", "--threshold", "80%", "--rollover-max", "1000", "--record-denials", "--mode", "soft", "--grace", "10%")
	// Naming everything it has is no loss.
	expect(0, "capacity:", "limits", "put", "team-spend", "--capacity", "5000", "--period", "month", "--tz", "Europe/Berlin",
		"--threshold", "50%", "--threshold", "80%", "--rollover-max", "1000", "--record-denials", "--mode", "soft", "--grace", "10%")

	// set changes only what it names.
	expect(0, "6000", "limits", "set", "team-spend", "--capacity", "6000")
	kept("after limits set --capacity", "6000")

	// get shows every field a put would drop.
	out = expect(0, "team-spend", "limits", "get", "team-spend")
	for _, want := range []string{"thresholds:", "50%, 80%", "rollover:", "up to 1000", "mode:", "soft, grace 10%", "record denials:  true", "history:", "per month from day 1, Europe/Berlin"} {
		if !strings.Contains(out, want) {
			t.Errorf("limits get does not show %q:\n%s", want, out)
		}
	}

	expect(0, "none", "limits", "set", "team-spend", "--threshold", "none", "--rollover-max", "none", "--mode", "enforce")
	l := get()
	if len(l.Thresholds) != 0 || l.Rollover != nil || l.Mode != api.ModeEnforce || l.Grace != nil || !l.RecordDenials || l.Capacity.String() != "6000" {
		b, _ := json.Marshal(l)
		t.Fatalf("after limits set --threshold none --rollover-max none --mode enforce: %s", b)
	}
	expect(0, "per week", "limits", "set", "team-spend", "--period", "week", "--start-day", "3")
	if l := get(); l.Period == nil || l.Period.TZ != "Europe/Berlin" || l.Period.Every != api.Week || *l.Period.StartDay != 3 {
		b, _ := json.Marshal(l)
		t.Fatalf("after limits set --period week: %s", b)
	}
	// --replace makes the command line the whole limit.
	expect(0, "record denials:  false", "limits", "put", "team-spend", "--capacity", "10", "--leak", "1/1s", "--replace")

	expect(1, "limit_not_found", "limits", "set", "nope", "--capacity", "1")
	expect(2, "--tz", "limits", "set", "team-spend", "--tz", "UTC")
	expect(2, "--replace", "limits", "set", "team-spend", "--capacity", "1", "--replace")
	expect(2, "name one", "limits", "set", "team-spend", "--leak", "1/1s", "--window", "1m")
	// A window's precision is kept unless it was the default.
	expect(0, "in any 1m (slots of 1s)", "limits", "put", "logins", "--capacity", "5", "--window", "1m")
	expect(0, "in any 2m (slots of 1s)", "limits", "put", "logins", "--capacity", "5", "--window", "2m")
	expect(0, "in any 2m (slots of 10s)", "limits", "set", "logins", "--precision", "10s")
	expect(2, "precision 10s (--precision)", "limits", "put", "logins", "--capacity", "5", "--window", "2m")
	expect(0, "in any 3m (slots of 10s)", "limits", "set", "logins", "--window", "3m", "--precision", "10s")
	// A new limit is created by put as before.
	expect(0, "per day", "limits", "put", "fresh", "--capacity", "1", "--period", "day")
}
