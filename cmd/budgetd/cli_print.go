package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/shopspring/decimal"
)

// The JSON the CLI prints: budgetd's own field names, amounts as decimal
// strings, times in RFC 3339 with microseconds.

type limitJSON struct {
	Name      string   `json:"name"`
	Capacity  string   `json:"capacity"`
	Leak      leakJSON `json:"leak"`
	History   bool     `json:"history"`
	CreatedAt string   `json:"created_at"`
	UpdatedAt string   `json:"updated_at"`
}

type leakJSON struct {
	Amount string `json:"amount"`
	Per    string `json:"per"`
}

type bucketJSON struct {
	Level     string  `json:"level"`
	Held      string  `json:"held"`
	Remaining string  `json:"remaining"`
	Capacity  string  `json:"capacity"`
	UpdatedAt *string `json:"updated_at"`
}

type decisionJSON struct {
	Accepted   bool    `json:"accepted"`
	Level      string  `json:"level"`
	Held       string  `json:"held"`
	Remaining  string  `json:"remaining"`
	Capacity   string  `json:"capacity"`
	RetryAfter *string `json:"retry_after"`
	NeverFits  bool    `json:"never_fits"`
}

type entryJSON struct {
	ID            string            `json:"id"`
	Time          string            `json:"time"`
	Event         string            `json:"event"`
	Amount        string            `json:"amount"`
	ReservationID string            `json:"reservation_id,omitempty"`
	Meta          map[string]string `json:"meta,omitempty"`
}

type holdJSON struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Amount    string `json:"amount"`
	CreatedAt string `json:"created_at"`
	ExpiresAt string `json:"expires_at"`
}

const cliTime = "2006-01-02T15:04:05.000000Z"

func fmtTime(t time.Time) string { return t.UTC().Format(cliTime) }

func optTime(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := fmtTime(*t)
	return &s
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

func (c *cli) printLimits(ls []client.Limit, one bool) error {
	if c.json {
		out := make([]limitJSON, len(ls))
		for i, l := range ls {
			out[i] = limitJSON{l.Name, l.Capacity.String(), leakJSON{l.Leak.Amount.String(), shortDuration(l.Leak.Per)}, l.History, fmtTime(l.CreatedAt), fmtTime(l.UpdatedAt)}
		}
		if one {
			return c.printJSON(out[0])
		}
		return c.printJSON(map[string]any{"items": out})
	}
	rows := make([][]string, len(ls))
	for i, l := range ls {
		rows[i] = []string{l.Name, l.Capacity.String(), l.Leak.Amount.String() + " per " + shortDuration(l.Leak.Per), fmt.Sprint(l.History), fmtTime(l.UpdatedAt)}
	}
	c.table("NAME\tCAPACITY\tLEAK\tHISTORY\tUPDATED", rows)
	return nil
}

// shortDuration writes 720h rather than 720h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (c *cli) printBucket(b client.Bucket) error {
	if c.json {
		return c.printJSON(bucketJSON{b.Level.String(), b.Held.String(), b.Remaining.String(), b.Capacity.String(), optTime(b.UpdatedAt)})
	}
	updated := "never"
	if b.UpdatedAt != nil {
		updated = fmtTime(*b.UpdatedAt)
	}
	c.table("LEVEL\tHELD\tREMAINING\tCAPACITY\tUPDATED", [][]string{{b.Level.String(), b.Held.String(), b.Remaining.String(), b.Capacity.String(), updated}})
	return nil
}

// printDecision prints a decision and turns a denial into exit status
// exitDenied.
func (c *cli) printDecision(d client.Decision) error {
	var retry *string
	if !d.Accepted && !d.NeverFits {
		s := seconds(d.RetryAfter)
		retry = &s
	}
	if c.json {
		if err := c.printJSON(decisionJSON{d.Accepted, d.Level.String(), d.Held.String(), d.Remaining.String(), d.Capacity.String(), retry, d.NeverFits}); err != nil {
			return err
		}
	} else {
		verdict, after := "accepted", "-"
		switch {
		case d.NeverFits:
			verdict, after = "denied", "never fits"
		case !d.Accepted:
			verdict, after = "denied", *retry+"s"
		}
		c.table("DECISION\tLEVEL\tHELD\tREMAINING\tCAPACITY\tRETRY AFTER", [][]string{{verdict, d.Level.String(), d.Held.String(), d.Remaining.String(), d.Capacity.String(), after}})
	}
	switch {
	case d.NeverFits:
		return cliError{exitDenied, "denied: the cost is larger than the capacity and never fits"}
	case !d.Accepted:
		return cliError{exitDenied, "denied: retry after " + *retry + "s"}
	}
	return nil
}

func (c *cli) printHistory(es []client.Entry, next string) error {
	if c.json {
		out := make([]entryJSON, len(es))
		for i, e := range es {
			out[i] = entryJSON{e.ID, fmtTime(e.Time), string(e.Event), e.Amount.String(), e.ReservationID, e.Meta}
		}
		var nc *string
		if next != "" {
			nc = &next
		}
		return c.printJSON(map[string]any{"items": out, "next_cursor": nc})
	}
	rows := make([][]string, len(es))
	for i, e := range es {
		rows[i] = []string{fmtTime(e.Time), string(e.Event), e.Amount.String(), or(e.ReservationID, "-"), e.ID}
	}
	c.table("TIME\tEVENT\tAMOUNT\tRESERVATION\tID", rows)
	if next != "" {
		fmt.Fprintf(c.stdout, "more: --cursor %s\n", next)
	}
	return nil
}

func (c *cli) printHolds(hs []client.Reservation) error {
	if c.json {
		out := make([]holdJSON, len(hs))
		for i, h := range hs {
			out[i] = holdJSON{h.ID, string(h.State), h.Amount.String(), fmtTime(h.CreatedAt), fmtTime(h.ExpiresAt)}
		}
		return c.printJSON(map[string]any{"items": out})
	}
	rows := make([][]string, len(hs))
	for i, h := range hs {
		rows[i] = []string{h.ID, string(h.State), h.Amount.String(), fmtTime(h.ExpiresAt)}
	}
	c.table("ID\tSTATE\tAMOUNT\tEXPIRES", rows)
	return nil
}
