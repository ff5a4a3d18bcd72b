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
	"github.com/shopspring/decimal"
)

// With --json the CLI prints budgetd's own documents (package api): the
// field names, decimal strings and nulls a script reading budgetd's API
// expects. Tables are for people.

const cliTime = "2006-01-02T15:04:05.000000Z"

func fmtTime(t time.Time) string { return t.UTC().Format(cliTime) }

// optTime writes a time that may be absent, "-" when it is.
func optTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

// seconds writes a duration as budgetd's decimal seconds.
func seconds(d time.Duration) string {
	return decimal.NewFromInt(d.Microseconds()).Shift(-6).String()
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

// limitDoc is l as budgetd's limit document.
func limitDoc(l client.Limit) api.Limit {
	d := api.Limit{Name: l.Name, Capacity: l.Capacity, History: l.History, RecordDenials: l.RecordDenials, Mode: l.Mode, Thresholds: l.Thresholds, CreatedAt: api.NewTime(l.CreatedAt), UpdatedAt: api.NewTime(l.UpdatedAt)}
	if d.Thresholds == nil {
		d.Thresholds = []string{}
	}
	if l.Mode == api.ModeSoft {
		d.Grace = api.NewPercent(l.Grace)
	}
	if l.Leak != nil {
		d.Leak = &api.Leak{Amount: l.Leak.Amount, Per: api.Duration(l.Leak.Per)}
	}
	if l.Period != nil {
		d.Period = &api.Period{Every: l.Period.Every, TZ: l.Period.TZ}
		if sd := l.Period.StartDay; sd != 0 {
			d.Period.StartDay = &sd
		}
	}
	if l.Window != nil {
		d.Window = &api.Window{Length: api.Duration(l.Window.Length), Precision: api.Duration(l.Window.Precision)}
	}
	if l.Rollover != nil {
		d.Rollover = &api.Rollover{Max: l.Rollover.Max}
	}
	return d
}

// rule says in words how a limit refills: "5000 per 720h", "per month
// from day 1, Europe/Berlin" or "in any 1m (slots of 1s)", and its mode
// when it is not enforce: "…, shadow" or "…, soft +10%".
func rule(l client.Limit) string {
	switch l.Mode {
	case api.ModeShadow:
		return refill(l) + ", shadow"
	case api.ModeSoft:
		return refill(l) + ", soft +" + l.Grace.String() + "%"
	}
	return refill(l)
}

// refill says in words how a limit refills.
func refill(l client.Limit) string {
	switch {
	case l.Window != nil:
		return "in any " + api.Duration(l.Window.Length).String() + " (slots of " + api.Duration(l.Window.Precision).String() + ")"
	case l.Period != nil:
		s := "per " + string(l.Period.Every)
		switch l.Period.Every {
		case api.Month, api.Quarter:
			s += " from day " + itoa(l.Period.StartDay)
		case api.Week:
			s += " from " + time.Weekday(l.Period.StartDay%7).String()
		}
		s += ", " + l.Period.TZ
		if l.Rollover != nil {
			s += ", rollover up to " + l.Rollover.Max.String()
		}
		return s
	case l.Leak != nil:
		return l.Leak.Amount.String() + " per " + api.Duration(l.Leak.Per).String()
	}
	return "-"
}

// resetsAt asks budgetd when the current period of a periodic limit ends
// (every bucket of a limit shares its periods; reading a bucket never
// written changes nothing): "-" for a leaky limit or when it cannot say.
func resetsAt(ctx context.Context, cl *client.Client, l client.Limit) string {
	if l.Period == nil {
		return "-"
	}
	b, err := cl.Bucket(ctx, l.Name, "-")
	if err != nil {
		return "-"
	}
	return optTime(b.ResetsAt)
}

func (c *cli) printLimits(ctx context.Context, cl *client.Client, ls []client.Limit, one bool) error {
	if c.json {
		out := make([]api.Limit, len(ls))
		for i, l := range ls {
			out[i] = limitDoc(l)
		}
		if one {
			return c.printJSON(out[0])
		}
		return c.printJSON(api.Page[api.Limit]{Items: out})
	}
	rows := make([][]string, len(ls))
	for i, l := range ls {
		rows[i] = []string{l.Name, l.Capacity.String(), rule(l), resetsAt(ctx, cl, l), fmt.Sprint(l.History), fmtTime(l.UpdatedAt)}
	}
	c.table("NAME\tCAPACITY\tRULE\tRESETS AT\tHISTORY\tUPDATED", rows)
	return nil
}

func bucketDoc(b client.Bucket) api.BucketState {
	return api.BucketState{Level: b.Level, Held: b.Held, Remaining: b.Remaining, Capacity: b.Capacity, UpdatedAt: docTime(b.UpdatedAt), PeriodStart: docTime(b.PeriodStart), ResetsAt: docTime(b.ResetsAt),
		Override: optEntry(b.Override), Grants: b.Grants, Rollover: b.Rollover}
}

// docTime is a time that may be absent, as the api writes it.
func docTime(t *time.Time) *api.Time {
	if t == nil {
		return nil
	}
	return &api.Time{Time: *t}
}

func (c *cli) printBucket(b client.Bucket) error {
	if c.json {
		return c.printJSON(bucketDoc(b))
	}
	updated := "never"
	if b.UpdatedAt != nil {
		updated = fmtTime(*b.UpdatedAt)
	}
	c.table("LEVEL\tHELD\tREMAINING\tCAPACITY\tUPDATED\tRESETS AT", [][]string{{b.Level.String(), b.Held.String(), b.Remaining.String(), b.Capacity.String(), updated, optTime(b.ResetsAt)}})
	return nil
}

func decisionDoc(d client.Decision) api.Decision {
	out := api.Decision{Accepted: d.Accepted, Level: d.Level, Held: d.Held, Remaining: d.Remaining, Capacity: d.Capacity, NeverFits: d.NeverFits, PeriodStart: docTime(d.PeriodStart), ResetsAt: docTime(d.ResetsAt)}
	if !d.Accepted && !d.NeverFits {
		s := decimal.NewFromInt(d.RetryAfter.Microseconds()).Shift(-6)
		out.RetryAfter = &s
	}
	out.EntryID = optEntry(d.EntryID)
	out.ShadowDenied, out.OverCapacity = d.ShadowDenied, d.OverCapacity
	out.Override = optEntry(d.Override)
	out.Grants, out.Rollover = d.Grants, d.Rollover
	return out
}

// optEntry is a history entry id as a document has it: nil for none.
func optEntry(id string) *string {
	if id == "" {
		return nil
	}
	return &id
}

// printDecision prints a decision and turns a denial into exit status
// exitDenied.
func (c *cli) printDecision(d client.Decision) error {
	if c.json {
		if err := c.printJSON(decisionDoc(d)); err != nil {
			return err
		}
	} else {
		c.decisionTable(d)
	}
	return denial(d)
}

func (c *cli) decisionTable(d client.Decision) {
	verdict, after := "accepted", "-"
	switch {
	case d.NeverFits:
		verdict, after = "denied", "never fits"
	case !d.Accepted:
		verdict, after = "denied", seconds(d.RetryAfter)+"s"
	case d.ShadowDenied:
		verdict = "accepted (shadow: enforce denies)"
	case d.OverCapacity:
		verdict = "accepted (over capacity)"
	}
	c.table("DECISION\tLEVEL\tHELD\tREMAINING\tCAPACITY\tRETRY AFTER\tRESETS AT", [][]string{{verdict, d.Level.String(), d.Held.String(), d.Remaining.String(), d.Capacity.String(), after, optTime(d.ResetsAt)}})
}

// denial is the exit of a denied decision, nil when accepted.
func denial(d client.Decision) error {
	switch {
	case d.NeverFits:
		return cliError{exitDenied, "denied: the cost is larger than the capacity and never fits"}
	case !d.Accepted:
		return cliError{exitDenied, "denied: retry after " + seconds(d.RetryAfter) + "s"}
	}
	return nil
}

func reservationDoc(r client.Reservation) api.Reservation {
	return api.Reservation{
		ID: r.ID, Limit: r.Limit, Key: r.Key, State: r.State, Amount: r.Amount, CommittedAmount: r.CommittedAmount,
		CreatedAt: api.NewTime(r.CreatedAt), ExpiresAt: api.NewTime(r.ExpiresAt), ResolvedAt: docTime(r.ResolvedAt),
	}
}

// printReserved prints a Reserve: the hold (only its id with -q, for
// hold=$(budgetd reserve … -q)), or the denial.
func (c *cli) printReserved(h *client.Reservation, d client.Decision) error {
	switch {
	case h == nil && c.quiet:
	case h == nil && c.json:
		if err := c.printJSON(decisionDoc(d)); err != nil {
			return err
		}
	case h == nil:
		c.decisionTable(d)
	case c.quiet:
		fmt.Fprintln(c.stdout, h.ID)
	case c.json:
		return c.printJSON(api.Reserved{Reservation: reservationDoc(*h), Decision: decisionDoc(d)})
	default:
		c.table("ID\tAMOUNT\tEXPIRES\tLEVEL\tHELD\tREMAINING\tRESETS AT", [][]string{{h.ID, h.Amount.String(), fmtTime(h.ExpiresAt), d.Level.String(), d.Held.String(), d.Remaining.String(), optTime(d.ResetsAt)}})
	}
	return denial(d)
}

func (c *cli) printResolved(r client.Resolved) error {
	if c.json {
		b := bucketDoc(r.Bucket)
		return c.printJSON(api.Resolved{Reservation: reservationDoc(r.Reservation), BucketState: b, Bucket: b})
	}
	charged := "-"
	if r.Reservation.CommittedAmount != nil {
		charged = r.Reservation.CommittedAmount.String()
	}
	b := r.Bucket
	c.table("ID\tSTATE\tCHARGED\tLEVEL\tHELD\tREMAINING", [][]string{{r.Reservation.ID, string(r.Reservation.State), charged, b.Level.String(), b.Held.String(), b.Remaining.String()}})
	return nil
}

func (c *cli) printDrained(d client.Drained) error {
	b := d.Bucket
	if c.json {
		return c.printJSON(api.Drained{
			Decision: api.Decision{Accepted: true, Level: b.Level, Held: b.Held, Remaining: b.Remaining, Capacity: b.Capacity, PeriodStart: docTime(b.PeriodStart), ResetsAt: docTime(b.ResetsAt),
				EntryID: optEntry(d.EntryID)},
			UpdatedAt: docTime(b.UpdatedAt), Removed: d.Removed,
		})
	}
	c.table("REMOVED\tLEVEL\tHELD\tREMAINING\tCAPACITY", [][]string{{d.Removed.String(), b.Level.String(), b.Held.String(), b.Remaining.String(), b.Capacity.String()}})
	return nil
}

func (c *cli) printEvents(es []client.Event, next string) error {
	if c.json {
		out := make([]api.WebhookEvent, len(es))
		for i, e := range es {
			out[i] = api.WebhookEvent{ID: e.ID, Type: e.Type, Time: api.NewTime(e.Time), Limit: e.Limit, Key: e.Key, Threshold: e.Threshold, Used: e.Used, Capacity: e.Capacity, PeriodStart: docTime(e.PeriodStart)}
		}
		return c.printJSON(api.EventPage{Items: out, NextCursor: next})
	}
	rows := make([][]string, len(es))
	for i, e := range es {
		rows[i] = []string{fmtTime(e.Time), e.Type, e.Limit, e.Key, e.Threshold, e.Used.String(), e.Capacity.String(), e.ID}
	}
	c.table("TIME\tTYPE\tLIMIT\tKEY\tTHRESHOLD\tUSED\tCAPACITY\tID", rows)
	fmt.Fprintf(c.stdout, "next: --after %s\n", next)
	return nil
}

func (c *cli) printHistory(es []client.Entry, next string) error {
	if c.json {
		out := make([]api.HistoryEntry, len(es))
		for i, e := range es {
			out[i] = api.HistoryEntry{ID: e.ID, Time: api.NewTime(e.Time), Event: e.Event, Amount: e.Amount, ReservationID: e.ReservationID, Meta: e.Meta, ShadowDenied: e.ShadowDenied}
		}
		p := api.Page[api.HistoryEntry]{Items: out}
		if next != "" {
			p.NextCursor = &next
		}
		return c.printJSON(p)
	}
	rows := make([][]string, len(es))
	for i, e := range es {
		rows[i] = []string{fmtTime(e.Time), string(e.Event), e.Amount.String(), or(e.ReservationID, "-"), metaText(e.Meta), e.ID}
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

func (c *cli) printHolds(hs []client.Reservation) error {
	if c.json {
		out := make([]api.Reservation, len(hs))
		for i, h := range hs {
			out[i] = reservationDoc(h)
		}
		return c.printJSON(api.ReservationList{Items: out})
	}
	rows := make([][]string, len(hs))
	for i, h := range hs {
		rows[i] = []string{h.ID, string(h.State), h.Amount.String(), fmtTime(h.ExpiresAt)}
	}
	c.table("ID\tSTATE\tAMOUNT\tEXPIRES", rows)
	return nil
}
