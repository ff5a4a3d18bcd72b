package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/client"
)

// A limit is written whole (PUT), so a command line that names only some of
// its fields would drop the others: thresholds, rollover or a mode set
// earlier, by the CLI, curl or the dashboard. The CLI never drops what it
// does not show:
//
//   - budgetd limits set NAME changes only the flags named: it reads the
//     limit, changes what the flags name and writes it back;
//   - budgetd limits put NAME states a whole limit: on an existing limit it
//     refuses (exit 2) when it would drop or reset a field the command line
//     does not name, and names each one, unless --replace says that the
//     command line is the whole limit.
//
// Both read the limit before writing it; a change made by someone else
// between the read and the write is overwritten. Closing that needs a
// conditional PUT, which budgetd does not have: GET /v1/limits/{name}
// sends no ETag (nor any revision but updated_at), PUT ignores If-Match
// and answers no 412, and ledger.Store.PutLimit takes no expected
// revision to compare in its atomic step.

const putUsage = "budgetd limits put NAME needs --capacity C and one of --period day|week|month|quarter|year [--tz ZONE] [--start-day N], --leak AMOUNT/PER (e.g. --leak 10/1s) or --window LENGTH [--precision P] (e.g. --window 1m)"

// limits runs budgetd limits list|get|put|set|delete.
func (c *cli) limits(ctx context.Context, cl *client.Client) error {
	if len(c.args) == 0 {
		return usageError{"budgetd limits: list, get, put, set, delete or export (see budgetd help)"}
	}
	sub := c.args[0]
	c.args = c.args[1:]
	switch sub {
	case "list":
		return c.limitsList(ctx, cl)
	case "get":
		if err := c.want("limits get", 1, 1); err != nil {
			return err
		}
		l, err := cl.GetLimit(ctx, c.args[0])
		if err != nil {
			return err
		}
		return c.printLimit(ctx, cl, l)
	case "put":
		return c.limitsPut(ctx, cl)
	case "set":
		return c.limitsSet(ctx, cl)
	case "export":
		return c.limitsExport(ctx, cl)
	case "delete":
		if err := c.want("limits delete", 1, 1); err != nil {
			return err
		}
		if err := cl.DeleteLimit(ctx, c.args[0]); err != nil {
			return err
		}
		if c.json {
			return c.printJSON(map[string]any{"deleted": c.args[0]})
		}
		fmt.Fprintf(c.stdout, "deleted limit %s\n", c.args[0])
		return nil
	}
	return usageError{fmt.Sprintf("budgetd limits: unknown subcommand %q", sub)}
}

func (c *cli) limitsList(ctx context.Context, cl *client.Client) error {
	if err := c.want("limits list", 0, 0); err != nil {
		return err
	}
	var all []api.Limit
	cursor := c.cursor
	for {
		ls, next, err := cl.ListLimits(ctx, cursor, 1000)
		if err != nil {
			return err
		}
		all = append(all, ls...)
		if next == "" {
			break
		}
		cursor = next
	}
	return c.printLimits(ctx, cl, all)
}

// limitsPut runs budgetd limits put: the limit as the flags state it.
func (c *cli) limitsPut(ctx context.Context, cl *client.Client) error {
	if err := c.want("limits put", 1, 1); err != nil {
		return err
	}
	kinds := 0
	for _, set := range []bool{c.leak != "", c.period != "", c.window != 0} {
		if set {
			kinds++
		}
	}
	if c.capacity == "" || kinds != 1 {
		return usageError{putUsage}
	}
	spec := client.LimitSpec{}
	if err := c.applyLimitFlags(&spec, true); err != nil {
		return err
	}
	if !c.replace {
		old, err := cl.GetLimit(ctx, c.args[0])
		switch {
		case client.IsCode(err, api.CodeLimitNotFound):
		case err != nil:
			return err
		default:
			if lost := c.wouldDrop(old, spec); len(lost) > 0 {
				return usageError{fmt.Sprintf("budgetd limits put %s would drop what the limit has and this command line does not name: %s. "+
					"Name them again, change only what you name with budgetd limits set %s, or add --replace to make the command line the whole limit",
					c.args[0], strings.Join(lost, "; "), c.args[0])}
			}
		}
	}
	l, err := cl.PutLimit(ctx, c.args[0], spec)
	if err != nil {
		return err
	}
	return c.printLimit(ctx, cl, l)
}

// limitsSet runs budgetd limits set: the limit as it is, with only the
// flags named changed.
func (c *cli) limitsSet(ctx context.Context, cl *client.Client) error {
	if err := c.want("limits set", 1, 1); err != nil {
		return err
	}
	if c.replace {
		return usageError{"--replace goes with budgetd limits put; budgetd limits set keeps what it does not name"}
	}
	old, err := cl.GetLimit(ctx, c.args[0])
	if err != nil {
		return err
	}
	spec := specOf(old)
	if err := c.applyLimitFlags(&spec, false); err != nil {
		return err
	}
	l, err := cl.PutLimit(ctx, c.args[0], spec)
	if err != nil {
		return err
	}
	return c.printLimit(ctx, cl, l)
}

// specOf is the limit document l as the spec that writes it back
// unchanged (the CLI's flags are Go durations and numbers, as a spec's).
func specOf(l api.Limit) client.LimitSpec {
	history, denials := l.History, l.RecordDenials
	s := client.LimitSpec{Capacity: l.Capacity, History: &history, RecordDenials: &denials, Mode: l.Mode, Thresholds: l.Thresholds}
	if l.Mode == api.ModeSoft && l.Grace != nil {
		g := l.Grace.Value
		s.Grace = &g
	}
	if l.Leak != nil {
		s.Leak = &client.Leak{Amount: l.Leak.Amount, Per: time.Duration(l.Leak.Per)}
	}
	if l.Period != nil {
		s.Period = &client.Period{Every: l.Period.Every, TZ: l.Period.TZ}
		if l.Period.StartDay != nil { // none for days and years
			s.Period.StartDay = *l.Period.StartDay
		}
	}
	if l.Window != nil {
		s.Window = &client.Window{Length: time.Duration(l.Window.Length), Precision: time.Duration(l.Window.Precision)}
	}
	if l.Rollover != nil {
		v := *l.Rollover
		s.Rollover = &v
	}
	return s
}

// applyLimitFlags changes spec by the limit flags named on the command line
// (all of them for put, which starts from an empty spec).
func (c *cli) applyLimitFlags(spec *client.LimitSpec, put bool) error {
	named := func(f string) bool { return put || c.named[f] }
	if c.capacity != "" {
		capacity, err := parseAmount("--capacity", c.capacity)
		if err != nil {
			return err
		}
		spec.Capacity = capacity
	}
	if err := c.applyKind(spec); err != nil {
		return err
	}
	if (c.named["tz"] || c.named["start-day"] || c.named["rollover-max"] && c.rolloverMax != "none") && spec.Period == nil {
		return usageError{"--tz, --start-day and --rollover-max go with --period"}
	}
	if c.named["tz"] {
		spec.Period.TZ = c.tz
	}
	if c.named["start-day"] {
		spec.Period.StartDay = c.startDay
	}
	if c.named["precision"] {
		if spec.Window == nil {
			return usageError{"--precision goes with --window"}
		}
		spec.Window.Precision = c.precision
	}
	if named("history") {
		h := c.history
		spec.History = &h
	}
	if named("record-denials") {
		d := c.recordDenials
		spec.RecordDenials = &d
	}
	if named("mode") {
		spec.Mode = api.Mode(c.mode)
		if spec.Mode != api.ModeSoft {
			spec.Grace = nil
		}
	}
	if c.named["grace"] {
		if spec.Mode != api.ModeSoft {
			return usageError{"--grace goes with --mode soft"}
		}
		g, err := api.ParsePercent("--grace", c.grace)
		if err != nil {
			if g, err = api.ParsePercent("--grace", c.grace+"%"); err != nil {
				return usageError{fmt.Sprintf("--grace %q is not a percentage like 10%% or 2.5%%", c.grace)}
			}
		}
		spec.Grace = &g
	}
	if named("threshold") {
		spec.Thresholds = c.thresholds
		if len(c.thresholds) == 1 && c.thresholds[0] == "none" {
			spec.Thresholds = nil
		}
	}
	if c.named["rollover-max"] {
		spec.Rollover = nil
		if c.rolloverMax != "none" {
			m, err := parseAmount("--rollover-max", c.rolloverMax)
			if err != nil {
				return err
			}
			spec.Rollover = &client.Rollover{Max: m}
		}
	}
	return nil
}

// applyKind changes the kind of spec to the one named (--leak, --period or
// --window), if any: limits set keeps the zone of a periodic limit, and its
// start day while the period's length stays.
func (c *cli) applyKind(spec *client.LimitSpec) error {
	kinds := 0
	for _, f := range []string{"leak", "period", "window"} {
		if c.named[f] {
			kinds++
		}
	}
	if kinds > 1 {
		return usageError{"--leak, --period and --window are the three kinds of limit: name one"}
	}
	switch {
	case c.leak != "":
		amt, per, ok := strings.Cut(c.leak, "/")
		if !ok {
			return usageError{fmt.Sprintf("--leak %q is not AMOUNT/PER (e.g. 10/1s)", c.leak)}
		}
		leakAmount, err := parseAmount("--leak amount", amt)
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(per)
		if err != nil {
			return usageError{fmt.Sprintf("--leak: %q is not a duration like 1s or 720h", per)}
		}
		spec.Leak, spec.Period, spec.Window = &client.Leak{Amount: leakAmount, Per: d}, nil, nil
	case c.period != "":
		p := client.Period{Every: api.Every(c.period)}
		if spec.Period != nil {
			// set: the zone stays, and the start day while the length does.
			p.TZ = spec.Period.TZ
			if spec.Period.Every == p.Every {
				p.StartDay = spec.Period.StartDay
			}
		}
		spec.Leak, spec.Period, spec.Window = nil, &p, nil
	case c.window != 0:
		spec.Leak, spec.Period, spec.Window = nil, nil, &client.Window{Length: c.window}
	}
	return nil
}

// wouldDrop lists what writing spec over the limit old would drop or reset
// that the command line does not name.
func (c *cli) wouldDrop(old api.Limit, spec client.LimitSpec) []string {
	var lost []string
	if len(old.Thresholds) > 0 && !c.named["threshold"] {
		lost = append(lost, "thresholds "+strings.Join(old.Thresholds, ", ")+" (--threshold)")
	}
	if old.Rollover != nil && !c.named["rollover-max"] && spec.Period != nil {
		lost = append(lost, "rollover up to "+old.Rollover.Max.String()+" (--rollover-max)")
	}
	if old.Mode != api.ModeEnforce && old.Mode != "" && !c.named["mode"] {
		m := "mode " + string(old.Mode)
		if old.Mode == api.ModeSoft {
			m += " with grace " + grace(old)
		}
		lost = append(lost, m+" (--mode)")
	} else if old.Mode == api.ModeSoft && spec.Mode == api.ModeSoft && !c.named["grace"] && old.Grace != nil && !old.Grace.Value.IsZero() {
		lost = append(lost, "grace "+grace(old)+" (--grace)")
	}
	if old.RecordDenials && !c.named["record-denials"] {
		lost = append(lost, "record_denials (--record-denials)")
	}
	if !old.History && !c.named["history"] {
		lost = append(lost, "history off (--history=false)")
	}
	if old.Period != nil && spec.Period != nil {
		if old.Period.TZ != "" && old.Period.TZ != "UTC" && !c.named["tz"] {
			lost = append(lost, "time zone "+old.Period.TZ+" (--tz)")
		}
		if old.Period.Every == spec.Period.Every && startDay(old.Period) > 1 && !c.named["start-day"] {
			lost = append(lost, "start day "+itoa(startDay(old.Period))+" (--start-day)")
		}
	}
	if old.Window != nil && spec.Window != nil && !c.named["precision"] {
		// Lost only if it was not the default of the old length.
		if def, _ := api.DefaultPrecision(time.Duration(old.Window.Length)); api.Duration(def) != old.Window.Precision {
			lost = append(lost, "precision "+old.Window.Precision.String()+" (--precision)")
		}
	}
	return lost
}

// printLimit prints one limit: every field of it for people (what a put
// would otherwise drop unseen), its document with --json.
func (c *cli) printLimit(ctx context.Context, cl *client.Client, l api.Limit) error {
	if c.json {
		return c.printJSON(l)
	}
	mode := string(l.Mode)
	if l.Mode == api.ModeSoft {
		mode += ", grace " + grace(l)
	}
	thresholds := "none"
	if len(l.Thresholds) > 0 {
		thresholds = strings.Join(l.Thresholds, ", ")
	}
	rollover := "none"
	if l.Rollover != nil {
		rollover = "up to " + l.Rollover.Max.String()
	}
	rows := [][]string{
		{"name", l.Name},
		{"capacity", l.Capacity.String()},
		{"rule", rule(l)},
		{"mode", mode},
		{"thresholds", thresholds},
		{"rollover", rollover},
		{"record denials", fmt.Sprint(l.RecordDenials)},
		{"history", fmt.Sprint(l.History)},
	}
	if l.Period != nil {
		rows = append(rows, []string{"resets at", resetsAt(ctx, cl, l)})
	}
	rows = append(rows, []string{"created", l.CreatedAt.String()}, []string{"updated", l.UpdatedAt.String()})
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(w, "%s:\t%s\n", r[0], r[1])
	}
	return w.Flush()
}
