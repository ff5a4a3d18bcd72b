package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
)

// With --json the CLI prints budgetd's own documents (package api): the
// field names, decimal strings and nulls a script reading budgetd's API
// expects. Tables are for people.

const cliTime = "2006-01-02T15:04:05.000000Z"

func fmtTime(t time.Time) string { return t.UTC().Format(cliTime) }

// optTime writes a time that may be absent, "-" when it is.
func optTime(t *api.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(t.Time)
}

// wait writes how long until a cost fits for people: a Go duration rounded
// up to 10ms from a second on ("57h10m55.76s", exact below a second:
// "250µs"), and the instant it ends from now (when the call was sent:
// budgetd decided a little later, so a wait to a period's reset ends on
// the reset's second), rounded up to the second
// ("57h10m55.76s (at 2026-11-30T23:00:00Z)"). --json has budgetd's exact
// retry_after.
func wait(d time.Duration, now time.Time) string {
	shown := d
	if d >= time.Second {
		shown = (d + 10*time.Millisecond - 1).Truncate(10 * time.Millisecond)
	}
	at := now.Add(d)
	if t := at.Truncate(time.Second); !t.Equal(at) {
		at = t.Add(time.Second)
	}
	return shown.String() + " (at " + at.UTC().Format(time.RFC3339) + ")"
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *cli) table(header string, rows [][]string) {
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
}

// rule says in words how a limit refills: "5000 per 720h", "per month
// from day 1, Europe/Berlin" or "in any 1m (slots of 1s)", and its mode
// when it is not enforce: "…, shadow" or "…, soft +10%".
func rule(l api.Limit) string {
	switch l.Mode {
	case api.ModeShadow:
		return refill(l) + ", shadow"
	case api.ModeSoft:
		return refill(l) + ", soft +" + grace(l)
	}
	return refill(l)
}

// grace writes a soft limit's grace, "0%" when the document has none.
func grace(l api.Limit) string {
	if l.Grace == nil {
		return "0%"
	}
	return l.Grace.String()
}

// startDay is the start day of a period, 1 (the default) when the
// document has none.
func startDay(p *api.Period) int {
	if p == nil || p.StartDay == nil {
		return 1
	}
	return *p.StartDay
}

// refill says in words how a limit refills.
func refill(l api.Limit) string {
	switch {
	case l.Window != nil:
		return "in any " + l.Window.Length.String() + " (slots of " + l.Window.Precision.String() + ")"
	case l.Period != nil:
		s := "per " + string(l.Period.Every)
		switch l.Period.Every {
		case api.Month, api.Quarter:
			s += " from day " + itoa(startDay(l.Period))
		case api.Week:
			s += " from " + time.Weekday(startDay(l.Period)%7).String()
		}
		s += ", " + l.Period.TZ
		if l.Rollover != nil {
			s += ", rollover up to " + l.Rollover.Max.String()
		}
		return s
	case l.Leak != nil:
		return l.Leak.Amount.String() + " per " + l.Leak.Per.String()
	}
	return "-"
}

// resetsAt asks budgetd when the current period of a periodic limit ends
// (every bucket of a limit shares its periods; reading a bucket never
// written changes nothing): "-" for a leaky limit or when it cannot say.
func resetsAt(ctx context.Context, cl *client.Client, l api.Limit) string {
	if l.Period == nil {
		return "-"
	}
	b, err := cl.Bucket(ctx, l.Name, "-")
	if err != nil {
		return "-"
	}
	return optTime(b.ResetsAt)
}

// printLimits prints a list of limits: a table, or budgetd's page of them
// with --json (every page read).
func (c *cli) printLimits(ctx context.Context, cl *client.Client, ls []api.Limit) error {
	if c.json {
		return c.printJSON(api.Page[api.Limit]{Items: nonNil(ls)})
	}
	rows := make([][]string, len(ls))
	for i, l := range ls {
		rows[i] = []string{l.Name, l.Capacity.String(), rule(l), resetsAt(ctx, cl, l), fmt.Sprint(l.History), l.UpdatedAt.String()}
	}
	c.table("NAME\tCAPACITY\tRULE\tRESETS AT\tHISTORY\tUPDATED", rows)
	return nil
}

func (c *cli) printBucket(b api.BucketState) error {
	if c.json {
		return c.printJSON(b)
	}
	updated := "never"
	if b.UpdatedAt != nil {
		updated = b.UpdatedAt.String()
	}
	c.table("LEVEL\tHELD\tREMAINING\tCAPACITY\tUPDATED\tRESETS AT", [][]string{{b.Level.String(), b.Held.String(), b.Remaining.String(), b.Capacity.String(), updated, optTime(b.ResetsAt)}})
	return nil
}

// printDecision prints a decision and turns a denial into exit status
// exitDenied.
func (c *cli) printDecision(d client.Decision) error {
	if c.json {
		if err := c.printJSON(d.Decision); err != nil {
			return err
		}
	} else {
		c.decisionTable(d)
	}
	return c.denial(d)
}

func (c *cli) decisionTable(d client.Decision) {
	verdict, after := "accepted", "-"
	switch {
	case d.NeverFits:
		verdict, after = "denied", "never fits"
	case !d.Accepted:
		verdict, after = "denied", wait(d.RetryAfterDuration(), c.sent)
	case d.ShadowDenied:
		verdict = "accepted (shadow: enforce denies)"
	case d.OverCapacity:
		verdict = "accepted (over capacity)"
	}
	c.table("DECISION\tLEVEL\tHELD\tREMAINING\tCAPACITY\tRETRY AFTER\tRESETS AT", [][]string{{verdict, d.Level.String(), d.Held.String(), d.Remaining.String(), d.Capacity.String(), after, optTime(d.ResetsAt)}})
}

// denial is the exit of a denied decision, nil when accepted.
func (c *cli) denial(d client.Decision) error {
	switch {
	case d.NeverFits:
		return cliError{exitDenied, "denied: the cost is larger than the capacity and never fits"}
	case !d.Accepted:
		return cliError{exitDenied, "denied: retry after " + wait(d.RetryAfterDuration(), c.sent)}
	}
	return nil
}

// printReserved prints a Reserve: the hold (only its id with -q, for
// hold=$(budgetd reserve … -q)), or the denial.
func (c *cli) printReserved(h *api.Reservation, d client.Decision) error {
	switch {
	case h == nil && c.quiet:
	case h == nil && c.json:
		if err := c.printJSON(d.Decision); err != nil {
			return err
		}
	case h == nil:
		c.decisionTable(d)
	case c.quiet:
		fmt.Fprintln(c.stdout, h.ID)
	case c.json:
		// budgetd's answer is the hold and the decision side by side.
		return c.printJSON(api.Reserved{Reservation: *h, Decision: d.Decision})
	default:
		c.table("ID\tAMOUNT\tEXPIRES\tLEVEL\tHELD\tREMAINING\tRESETS AT", [][]string{{h.ID, h.Amount.String(), h.ExpiresAt.String(), d.Level.String(), d.Held.String(), d.Remaining.String(), optTime(d.ResetsAt)}})
	}
	return c.denial(d)
}

func (c *cli) printResolved(r api.Resolved) error {
	if c.json {
		return c.printJSON(r)
	}
	charged := "-"
	if r.Reservation.CommittedAmount != nil {
		charged = r.Reservation.CommittedAmount.String()
	}
	b := r.Bucket
	c.table("ID\tSTATE\tCHARGED\tLEVEL\tHELD\tREMAINING", [][]string{{r.Reservation.ID, string(r.Reservation.State), charged, b.Level.String(), b.Held.String(), b.Remaining.String()}})
	return nil
}

func (c *cli) printDrained(d api.Drained) error {
	if c.json {
		return c.printJSON(d)
	}
	c.table("REMOVED\tLEVEL\tHELD\tREMAINING\tCAPACITY", [][]string{{d.Removed.String(), d.Level.String(), d.Held.String(), d.Remaining.String(), d.Capacity.String()}})
	return nil
}

func (c *cli) printEvents(es []api.WebhookEvent, next string) error {
	if c.json {
		return c.printJSON(api.EventPage{Items: es, NextCursor: next})
	}
	rows := make([][]string, len(es))
	for i, e := range es {
		rows[i] = []string{e.Time.String(), e.Type, e.Limit, e.Key, e.Threshold, e.Used.String(), e.Capacity.String(), e.ID}
	}
	c.table("TIME\tTYPE\tLIMIT\tKEY\tTHRESHOLD\tUSED\tCAPACITY\tID", rows)
	fmt.Fprintf(c.stdout, "next: --after %s\n", next)
	return nil
}

func (c *cli) printHistory(es []api.HistoryEntry, next string) error {
	if c.json {
		p := api.Page[api.HistoryEntry]{Items: es}
		if next != "" {
			p.NextCursor = &next
		}
		return c.printJSON(p)
	}
	rows := make([][]string, len(es))
	for i, e := range es {
		rows[i] = []string{e.Time.String(), string(e.Event), e.Amount.String(), or(e.ReservationID, "-"), metaText(e.Meta), e.ID}
	}
	c.table("TIME\tEVENT\tAMOUNT\tRESERVATION\tMETA\tID", rows)
	if next != "" {
		fmt.Fprintf(c.stdout, "more: --cursor %s\n", next)
	}
	return nil
}

// metaText writes meta as k=v pairs in key order, "-" when none.
func metaText(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func (c *cli) printHolds(hs []api.Reservation) error {
	if c.json {
		return c.printJSON(api.ReservationList{Items: hs})
	}
	rows := make([][]string, len(hs))
	for i, h := range hs {
		rows[i] = []string{h.ID, string(h.State), h.Amount.String(), h.ExpiresAt.String()}
	}
	c.table("ID\tSTATE\tAMOUNT\tEXPIRES", rows)
	return nil
}

// nonNil is s, or an empty slice for nil: a page's items are never null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
