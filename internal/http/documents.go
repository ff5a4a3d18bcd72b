package http

// The documents the server answers, as package api's types: one function
// per document from the ledger's types. Only the decisions of a Fillup and
// a CanAccept, the hot path, are written without them (appendDecision,
// checked byte for byte against apiDecision).

import (
	"cmp"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
)

// optString is s, nil when empty.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// apiDecision is d with the id of the history entry the call wrote ("" for
// none) and the terms it was made under (the override that applied, the
// active grants and the rollover received).
func apiDecision(d bucket.Decision, entryID string, terms ledger.Limit) api.Decision {
	v := api.Decision{
		Accepted: d.Accepted, Level: d.Level.Decimal(), Held: d.Held.Decimal(), Remaining: d.Remaining.Decimal(),
		Capacity: d.Capacity.Decimal(), NeverFits: d.NeverFits,
		PeriodStart: api.OptTime(d.PeriodStart), ResetsAt: api.OptTime(d.ResetsAt), EntryID: optString(entryID),
		ShadowDenied: d.ShadowDenied, OverCapacity: d.OverCapacity,
		Override: optString(terms.Override), Grants: terms.Grants, Rollover: terms.Received,
	}
	if !d.Accepted && !d.NeverFits {
		s := d.RetryAfter.Seconds()
		v.RetryAfter = &s
	}
	return v
}

// apiBucket is a bucket's state without a cost.
func apiBucket(b ledger.BucketState) api.BucketState {
	return api.BucketState{
		Level: b.Level.Decimal(), Held: b.Held.Decimal(), Remaining: b.Remaining.Decimal(), Capacity: b.Capacity.Decimal(),
		UpdatedAt: api.OptTime(b.UpdatedAt), PeriodStart: api.OptTime(b.PeriodStart), ResetsAt: api.OptTime(b.ResetsAt),
		Override: optString(b.Override), Grants: b.Grants, Rollover: b.Rollover,
	}
}

// apiListed is one bucket of GET /v1/limits/{name}/buckets.
func apiListed(b ledger.ListedBucket) api.BucketListItem {
	return api.BucketListItem{Key: b.Key, BucketState: apiBucket(b.BucketState)}
}

// apiDrained is the answer of a Drain: always accepted, the bucket after
// it and the amount actually removed.
func apiDrained(res ledger.DrainResult) api.Drained {
	b := apiBucket(res.Bucket)
	return api.Drained{
		Decision: api.Decision{Accepted: true, Level: b.Level, Held: b.Held, Remaining: b.Remaining, Capacity: b.Capacity,
			PeriodStart: b.PeriodStart, ResetsAt: b.ResetsAt, EntryID: optString(res.EntryID),
			Override: b.Override, Grants: b.Grants, Rollover: b.Rollover},
		UpdatedAt: b.UpdatedAt,
		Removed:   res.Removed,
	}
}

// apiReservation is a hold; an expired one was resolved at its expiry.
func apiReservation(r ledger.Reservation) api.Reservation {
	v := api.Reservation{
		ID: r.ID, Limit: r.Bucket.Limit, Key: r.Bucket.Key, State: api.ReservationState(r.State), Amount: r.Amount,
		CreatedAt: api.NewTime(r.CreatedAt), ExpiresAt: api.NewTime(r.ExpiresAt), ResolvedAt: api.OptTime(r.ResolvedAt),
	}
	if r.State == ledger.Expired {
		v.ResolvedAt = api.OptTime(r.ExpiresAt)
	}
	if r.CommittedAmount.Valid {
		a := r.CommittedAmount.Decimal
		v.CommittedAmount = &a
	}
	return v
}

// apiReserved is the 201 answer of an accepted Reserve: the hold and the
// decision at the top level.
func apiReserved(r ledger.Reservation, d bucket.Decision, entryID string, terms ledger.Limit) api.Reserved {
	return api.Reserved{Reservation: apiReservation(r), Decision: apiDecision(d, entryID, terms)}
}

// apiHolds is the answer of GET …/buckets/{key}/reservations: every active
// hold of the bucket (at most ledger.MaxHolds), so there is no next page.
func apiHolds(holds []ledger.Reservation) api.ReservationList {
	v := api.ReservationList{Items: make([]api.Reservation, len(holds))}
	for i, r := range holds {
		v.Items[i] = apiReservation(r)
	}
	return v
}

// apiResolved is the answer of a Commit or Release: the hold, and the
// bucket's state after it at the top level and under "bucket".
func apiResolved(res ledger.ResolveResult) api.Resolved {
	b := apiBucket(res.Bucket)
	return api.Resolved{Reservation: apiReservation(res.Reservation), BucketState: b, Bucket: b}
}

// apiLimit is a limit document: exactly one of leak, period and window is
// set.
func apiLimit(l ledger.Limit) api.Limit {
	v := api.Limit{
		Name: l.Name, Capacity: l.Capacity, History: l.History, RecordDenials: l.RecordDenials,
		Mode:       api.Mode(cmp.Or(l.Mode, ledger.ModeEnforce)),
		Thresholds: make([]string, len(l.Thresholds)),
		CreatedAt:  api.NewTime(l.CreatedAt), UpdatedAt: api.NewTime(l.UpdatedAt),
	}
	if l.Mode == ledger.ModeSoft {
		v.Grace = api.NewPercent(l.Grace)
	}
	for i, t := range l.Thresholds {
		v.Thresholds[i] = t.String()
	}
	if p := l.Period; p != nil {
		v.Period = &api.Period{Every: api.Every(p.Every), TZ: p.TZ}
		if sd := p.StartDay; sd != 0 {
			v.Period.StartDay = &sd
		}
	} else if w := l.Window; w != nil {
		v.Window = &api.Window{Length: api.Duration(w.Length), Precision: api.Duration(w.Precision)}
	} else {
		v.Leak = &api.Leak{Amount: l.LeakAmount, Per: api.Duration(l.LeakPer)}
	}
	if l.Rollover != nil {
		v.Rollover = &api.Rollover{Max: l.Rollover.Max}
	}
	return v
}

// apiOverride is an override document: the terms it leaves to the limit
// are null.
func apiOverride(o ledger.Override) api.Override {
	v := api.Override{Pattern: o.Pattern, ExpiresAt: api.OptTime(o.ExpiresAt), CreatedAt: api.NewTime(o.CreatedAt), UpdatedAt: api.NewTime(o.UpdatedAt)}
	if o.Capacity.Valid {
		c := o.Capacity.Decimal
		v.Capacity = &c
	}
	if o.LeakPer != 0 {
		v.Leak = &api.Leak{Amount: o.LeakAmount, Per: api.Duration(o.LeakPer)}
	}
	if o.TZ != "" || o.StartDay != 0 {
		v.Period = &api.OverridePeriod{TZ: o.TZ}
		if sd := o.StartDay; sd != 0 {
			v.Period.StartDay = &sd
		}
	}
	if o.WindowLength != 0 {
		v.Window = &api.OverrideWindow{Length: api.Duration(o.WindowLength)}
	}
	return v
}

// apiEntry is one history entry.
func apiEntry(e ledger.Entry) api.HistoryEntry {
	return api.HistoryEntry{
		ID: e.ID, Time: api.NewTime(e.Time), Event: api.Event(e.Event), Amount: e.Amount,
		ReservationID: e.ReservationID, GrantID: e.GrantID, Meta: api.Meta(e.Meta), ShadowDenied: e.ShadowDenied,
	}
}

// apiGrant is a grant.
func apiGrant(g ledger.Grant) api.Grant {
	return api.Grant{ID: g.ID, Amount: g.Amount, CreatedAt: api.NewTime(g.CreatedAt), ExpiresAt: api.NewTime(g.ExpiresAt)}
}

// apiGranted is the answer of POST …/grants and DELETE …/grants/{id}.
func apiGranted(res ledger.GrantResult) api.Granted {
	return api.Granted{Grant: apiGrant(res.Grant), EntryID: optString(res.EntryID), Bucket: apiBucket(res.Bucket)}
}

// apiLevels is a bucket's level series.
func apiLevels(ls ledger.LevelSeries) api.LevelSeries {
	v := api.LevelSeries{
		Items: make([]api.LevelPoint, len(ls.Points)), Capacity: ls.Capacity.Decimal(),
		From: api.NewTime(ls.From), To: api.NewTime(ls.To), PeriodStart: api.OptTime(ls.PeriodStart), ResetsAt: api.OptTime(ls.ResetsAt),
		Complete: ls.Complete,
	}
	for i, p := range ls.Points {
		v.Items[i] = api.LevelPoint{At: api.NewTime(p.At), Level: p.Level.Decimal(), Held: p.Held.Decimal(), Event: api.Event(p.Event)}
	}
	return v
}

// apiEvent is an event as GET /v1/events lists it and a webhook delivers
// it.
func apiEvent(e ledger.OutboxEvent) api.WebhookEvent {
	return api.NewWebhookEvent(e.ID, e.Type, e.Time, e.Bucket.Limit, e.Bucket.Key, e.Threshold, e.Used, e.Capacity, e.PeriodStart)
}

// apiPage is one page of a list of documents made by conv: items never
// null, next_cursor null on the last page (next "").
func apiPage[T, D any](items []T, next string, conv func(T) D) api.Page[D] {
	p := api.Page[D]{Items: make([]D, len(items))}
	for i, it := range items {
		p.Items[i] = conv(it)
	}
	if next != "" {
		p.NextCursor = &next
	}
	return p
}
