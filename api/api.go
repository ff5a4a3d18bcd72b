// Package api is budgetd's wire contract: the JSON documents of its HTTP API
// (docs/api.md, docs/openapi.json) as Go types, exactly as the server writes
// and reads them. The Go client and the CLI decode into these types, and
// tests check them against the server's rendering and the OpenAPI document
// both ways, so a field is added in one place.
//
// Amounts are decimal.Decimal values, written as JSON strings in budgetd's
// plain notation ("12.37", no exponent, no trailing zeros), so they are exact
// and an amount read from budgetd is written back byte for byte. Times are
// RFC 3339 in UTC; a time that may be absent is a pointer (JSON null).
//
// A limit is one kind of budget: a leaky bucket (Leak), a calendar period
// (Period) or a rolling window (Window). Exactly one of the kind fields of a Limit is set; a new kind
// comes as a new pointer field and a new Kind constant, so code that reads
// the kinds it knows keeps working.
package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Kind names the kind of a limit: the rule its buckets follow.
type Kind string

const (
	// KindLeak is a leaky bucket: Leak.Amount leaks out every Leak.Per.
	KindLeak Kind = "leak"
	// KindPeriod is a calendar budget: the level starts again from zero at
	// the start of every period in the limit's time zone.
	KindPeriod Kind = "period"
	// KindWindow is a rolling window: in every span of Window.Length the
	// charges accepted sum to at most the capacity.
	KindWindow Kind = "window"
)

// Mode is what a limit does with a cost that does not fit its capacity.
type Mode string

const (
	// ModeEnforce denies it (the default).
	ModeEnforce Mode = "enforce"
	// ModeShadow decides as enforce would but accepts and charges the cost
	// anyway, marking the decision shadow_denied: a new limit tried on live
	// traffic without refusing anyone.
	ModeShadow Mode = "shadow"
	// ModeSoft accepts while level + held stays within capacity × (1 +
	// grace), marking an accepted charge that ends above capacity
	// over_capacity.
	ModeSoft Mode = "soft"
)

// Every is the length of a calendar period.
type Every string

const (
	// Day periods start at local midnight.
	Day Every = "day"
	// Week periods start on the ISO weekday StartDay (1 Monday … 7 Sunday).
	Week Every = "week"
	// Month periods start on day StartDay (1–28) of every month.
	Month Every = "month"
	// Quarter periods start on day StartDay (1–28) of January, April, July
	// and October.
	Quarter Every = "quarter"
	// Year periods start on 1 January.
	Year Every = "year"
)

// Limit is a limit document (GET /v1/limits/{name}, an item of
// GET /v1/limits, the answer of PUT): exactly one of Leak, Period and
// Window is set, the others are null.
type Limit struct {
	// Name is the limit's name: 1–64 characters of [a-z0-9._-].
	Name string `json:"name"`
	// Capacity is the most a bucket may hold.
	Capacity decimal.Decimal `json:"capacity"`
	// Leak is the leak rate of a leaky limit; nil for another kind.
	Leak *Leak `json:"leak"`
	// Period is the calendar period of a periodic limit; nil for another
	// kind.
	Period *Period `json:"period"`
	// Window is the rolling window of a window limit; nil for another kind.
	Window *Window `json:"window"`
	// History says whether the limit records history entries.
	History bool `json:"history"`
	// RecordDenials says whether a denial writes a denied history entry.
	RecordDenials bool `json:"record_denials"`
	// Mode is what the limit does with a cost that does not fit.
	Mode Mode `json:"mode"`
	// Grace is how far above capacity a soft limit accepts, a percentage
	// of the capacity such as "10%"; nil for the other modes.
	Grace *Percent `json:"grace"`
	// Thresholds are the points of a bucket's use at which a write emits
	// an event: "80%" (of the capacity) or "4500.00" (an amount).
	Thresholds []string `json:"thresholds"`
	// Rollover is the rollover of a periodic limit; nil for none.
	Rollover *Rollover `json:"rollover"`
	// CreatedAt is when the limit was first created.
	CreatedAt Time `json:"created_at"`
	// UpdatedAt is when the limit was last written.
	UpdatedAt Time `json:"updated_at"`
}

// Kind returns the kind of the limit, "" when the document sets none.
func (l Limit) Kind() Kind {
	switch {
	case l.Window != nil:
		return KindWindow
	case l.Period != nil:
		return KindPeriod
	case l.Leak != nil:
		return KindLeak
	}
	return ""
}

// Rollover carries the capacity a bucket of a periodic limit left unused
// at the end of a period into the next period only, at most Max
// (docs/terms.md#rollover).
type Rollover struct {
	// Max is the most carried into a period: ≥ 0, at most 10^12.
	Max decimal.Decimal `json:"max"`
}

// Leak is a leak rate: Amount leaks out of a bucket every Per.
type Leak struct {
	// Amount is what leaks out every Per; > 0.
	Amount decimal.Decimal `json:"amount"`
	// Per is the leak's interval: at least 1µs, at most 87600h.
	Per Duration `json:"per"`
}

// Period is the calendar period of a limit document.
type Period struct {
	// Every is the length of the period.
	Every Every `json:"every"`
	// TZ is the IANA time zone the periods start in (budgetd's own zone
	// database), "UTC" by default.
	TZ string `json:"tz"`
	// StartDay is the day a period starts on: day of the month (1–28) for
	// month and quarter, ISO weekday (1–7) for week; nil for day and year.
	StartDay *int `json:"start_day"`
}

// Window is the rolling window of a limit document: a charge counts until
// Length after the end of its slot of Precision (slots are cut from the
// Unix epoch).
type Window struct {
	// Length is the span in which the charges accepted sum to at most the
	// capacity: from 1s to 8760h.
	Length Duration `json:"length"`
	// Precision is the length of a slot, the precision in force (the
	// default when none was given).
	Precision Duration `json:"precision"`
}

// WindowPut is the window of a LimitPut: Length is required; a zero
// Precision takes the default (the largest of 1ms, 10ms, 100ms, 1s, 10s,
// 1m, 10m, 1h and 24h that divides Length into at least 60 slots).
type WindowPut struct {
	// Length is the window's length.
	Length Duration `json:"length"`
	// Precision is the slot length; it must divide Length into at most
	// 1000 slots.
	Precision Duration `json:"precision,omitempty"`
}

// LimitPut is the body of PUT /v1/limits/{name}: exactly one of Leak and
// Period. A Limit read with GET may also be sent back as it is.
type LimitPut struct {
	// Capacity is the most a bucket may hold: > 0, at most 10^12.
	Capacity decimal.Decimal `json:"capacity"`
	// Leak makes the limit a leaky bucket.
	Leak *Leak `json:"leak,omitempty"`
	// Period makes the limit a calendar budget.
	Period *PeriodPut `json:"period,omitempty"`
	// Window makes the limit a rolling window.
	Window *WindowPut `json:"window,omitempty"`
	// RecordDenials makes a denied Fillup, Reserve or multi-bucket item
	// write a denied history entry; nil is the default (false).
	RecordDenials *bool `json:"record_denials,omitempty"`
	// Mode is what the limit does with a cost that does not fit; empty is
	// the default (enforce).
	Mode Mode `json:"mode,omitempty"`
	// Grace is, for ModeSoft only, how far above capacity the limit
	// accepts: 0% to 100%, at most 2 decimals; nil is 0%.
	Grace *Percent `json:"grace,omitempty"`
	// Thresholds are at most 8 distinct points of use at which a write
	// emits an event: "80%" (above 0, at most 200%, 2 decimals) or an
	// amount; nil is none.
	Thresholds []string `json:"thresholds,omitempty"`
	// Rollover (periodic limits only) carries unused capacity into the
	// next period; nil is none.
	Rollover *Rollover `json:"rollover,omitempty"`
	// History says whether the limit records history; nil is the default
	// (true).
	History *bool `json:"history,omitempty"`
}

// PeriodPut is the period of a LimitPut: Every is required, TZ and StartDay
// take their defaults (UTC, the first day) when empty.
type PeriodPut struct {
	// Every is the length of the period.
	Every Every `json:"every"`
	// TZ is an IANA time zone name; "" is UTC.
	TZ string `json:"tz,omitempty"`
	// StartDay is the day a period starts on (see Period); nil is 1, and it
	// must be nil for day and year periods.
	StartDay *int `json:"start_day,omitempty"`
}

// Decision is budgetd's answer to "may this cost be spent now?": CanAccept,
// Fillup, a denied Reserve, and each item of a multi-bucket Fillup. Level,
// Held, Remaining and Capacity describe the bucket after the change when
// accepted, and as it is otherwise.
type Decision struct {
	// Accepted says whether the cost fits (and, for a write, was charged).
	Accepted bool `json:"accepted"`
	// Level is the bucket's level, holds not included.
	Level decimal.Decimal `json:"level"`
	// Held is the sum of the bucket's active holds.
	Held decimal.Decimal `json:"held"`
	// Remaining is Capacity − Level − Held, at least zero.
	Remaining decimal.Decimal `json:"remaining"`
	// Capacity is the limit's capacity.
	Capacity decimal.Decimal `json:"capacity"`
	// RetryAfter is in seconds (up to 6 fractional digits) how long until
	// the cost fits if no other traffic came; nil when accepted or when the
	// cost never fits.
	RetryAfter *decimal.Decimal `json:"retry_after"`
	// NeverFits says the cost is larger than the capacity.
	NeverFits bool `json:"never_fits"`
	// PeriodStart is the start of the current period of a periodic limit;
	// nil for another kind.
	PeriodStart *Time `json:"period_start"`
	// ResetsAt is when the current period ends and the level starts again
	// from zero; nil for another kind.
	ResetsAt *Time `json:"resets_at"`
	// EntryID is the id of the history entry the call wrote (the reference
	// number to quote): the fillup, drain or reserved entry, or the denied
	// entry of a limit that records denials; nil when none was written,
	// and always for CanAccept.
	EntryID *string `json:"entry_id"`
	// ShadowDenied says a shadow limit accepted a cost that enforce would
	// have denied (for CanAccept: would accept it so).
	ShadowDenied bool `json:"shadow_denied"`
	// OverCapacity says a soft limit accepted a cost that ends above
	// capacity, within its grace (for CanAccept: would accept it so).
	OverCapacity bool `json:"over_capacity"`
	// Override is the pattern of the override whose terms applied to the
	// bucket; nil for the limit's own terms.
	Override *string `json:"override"`
	// Grants is the sum of the bucket's active grants, included in
	// Capacity ("0" for none).
	Grants decimal.Decimal `json:"grants"`
	// Rollover is the rollover the bucket received in the current period
	// (a periodic limit with rollover), included in Capacity ("0" for
	// none).
	Rollover decimal.Decimal `json:"rollover"`
}

// RetryAfterDuration returns RetryAfter as a duration, rounded up to the
// microsecond and saturating; zero when RetryAfter is nil.
func (d Decision) RetryAfterDuration() time.Duration {
	if d.RetryAfter == nil {
		return 0
	}
	us := d.RetryAfter.Shift(6).Ceil()
	if us.GreaterThan(decimal.NewFromInt(int64(time.Duration(1<<63-1) / time.Microsecond))) {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(us.IntPart()) * time.Microsecond
}

// BucketState is the state of one (limit, key) bucket without a cost:
// GET …/buckets/{key}.
type BucketState struct {
	// Level is the bucket's level, holds not included.
	Level decimal.Decimal `json:"level"`
	// Held is the sum of the bucket's active holds.
	Held decimal.Decimal `json:"held"`
	// Remaining is Capacity − Level − Held, at least zero.
	Remaining decimal.Decimal `json:"remaining"`
	// Capacity is the limit's capacity.
	Capacity decimal.Decimal `json:"capacity"`
	// UpdatedAt is when the bucket was last written; nil for a bucket never
	// written.
	UpdatedAt *Time `json:"updated_at"`
	// PeriodStart is the start of the current period of a periodic limit;
	// nil for another kind.
	PeriodStart *Time `json:"period_start"`
	// ResetsAt is when the current period ends; nil for another kind.
	ResetsAt *Time `json:"resets_at"`
	// Override is the pattern of the override whose terms apply to the
	// bucket now; nil for the limit's own terms.
	Override *string `json:"override"`
	// Grants is the sum of the bucket's active grants, included in
	// Capacity ("0" for none).
	Grants decimal.Decimal `json:"grants"`
	// Rollover is the rollover the bucket received in the current period
	// (a periodic limit with rollover), included in Capacity ("0" for
	// none).
	Rollover decimal.Decimal `json:"rollover"`
}

// BucketListItem is one bucket of GET /v1/limits/{name}/buckets.
type BucketListItem struct {
	// Key is the bucket's key.
	Key string `json:"key"`
	BucketState
}

// BucketOrder is the ?order of GET /v1/limits/{name}/buckets.
type BucketOrder string

// The orders of a bucket listing.
const (
	// OrderKey lists buckets in byte order of key (the default).
	OrderKey BucketOrder = "key"
	// OrderUsed lists buckets by used (level + held), highest first.
	OrderUsed BucketOrder = "used"
	// OrderShare lists buckets by used ÷ effective capacity, highest first.
	OrderShare BucketOrder = "share"
)

// BucketQuery is what GET /v1/limits/{name}/buckets selects and how it
// orders: Above ("80%" or an amount, one of the limit's thresholds) keeps
// the buckets whose mark for that threshold is above; Order is
// OrderKey when empty.
type BucketQuery struct {
	Above string
	Order BucketOrder
}

// ReservationState is the life-cycle state of a hold.
type ReservationState string

const (
	// Active holds count against the bucket until they are resolved or
	// expire.
	Active ReservationState = "active"
	// Committed holds were charged.
	Committed ReservationState = "committed"
	// Released holds were given back without a charge.
	Released ReservationState = "released"
	// Expired holds reached their expiry unresolved.
	Expired ReservationState = "expired"
)

// Reservation is a hold: GET /v1/reservations/{id}, an item of a bucket's
// hold list, and part of the answers of Reserve, Commit and Release.
type Reservation struct {
	// ID names the hold in Commit, Release and GET.
	ID string `json:"id"`
	// Limit is the limit of the held bucket.
	Limit string `json:"limit"`
	// Key is the key of the held bucket.
	Key string `json:"key"`
	// State is the hold's state.
	State ReservationState `json:"state"`
	// Amount is the held amount.
	Amount decimal.Decimal `json:"amount"`
	// CommittedAmount is what a commit charged; nil unless committed.
	CommittedAmount *decimal.Decimal `json:"committed_amount"`
	// CreatedAt is when the hold was made.
	CreatedAt Time `json:"created_at"`
	// ExpiresAt is when an unresolved hold expires.
	ExpiresAt Time `json:"expires_at"`
	// ResolvedAt is when the hold was committed, released or expired; nil
	// while active.
	ResolvedAt *Time `json:"resolved_at"`
}

// Reserved is the 201 answer of an accepted Reserve: the hold and the
// decision side by side at the top level. A denied Reserve answers a
// Decision alone (429).
type Reserved struct {
	Reservation
	Decision
}

// Resolved is the answer of Commit and Release: the hold, and the bucket's
// state after it both at the top level and under "bucket".
type Resolved struct {
	Reservation
	BucketState
	// Bucket is the bucket's state after the call.
	Bucket BucketState `json:"bucket"`
}

// Drained is the answer of a Drain: always accepted; the bucket after the
// change and the amount actually removed.
type Drained struct {
	Decision
	// UpdatedAt is when the bucket was last written.
	UpdatedAt *Time `json:"updated_at"`
	// Removed is the amount actually removed (the level is clamped at
	// zero).
	Removed decimal.Decimal `json:"removed"`
}

// Event is what a history entry records.
type Event string

const (
	// EventFillup is a Fillup (the amount is the cost).
	EventFillup Event = "fillup"
	// EventDrain is a Drain (the amount actually removed).
	EventDrain Event = "drain"
	// EventReserved is a hold made (the held amount).
	EventReserved Event = "reserved"
	// EventCommitted is a hold committed (the committed amount).
	EventCommitted Event = "committed"
	// EventReleased is a hold released (the held amount).
	EventReleased Event = "released"
	// EventExpired is a hold expired (the held amount).
	EventExpired Event = "expired"
	// EventDenied is a denied Fillup, Reserve or multi-bucket item of a limit
	// that records denials (the amount asked).
	EventDenied Event = "denied"
	// EventGranted is a grant added to the bucket: its amount and
	// grant_id.
	EventGranted Event = "granted"
	// EventRevoked is a grant revoked before it expired: its amount and
	// grant_id.
	EventRevoked Event = "revoked"
)

// Meta is what a caller says of an event (an order id, a user, a job),
// stored on its history entry: up to 16 keys of [a-z0-9_.-]{1,64}, values
// up to 256 bytes of UTF-8, at most 2 KiB in all.
type Meta map[string]string

// HistoryEntry is one entry of GET …/buckets/{key}/history.
type HistoryEntry struct {
	// ID is assigned by the store and grows with insertion order.
	ID string `json:"id"`
	// Time is when the event happened.
	Time Time `json:"time"`
	// Event is what happened.
	Event Event `json:"event"`
	// Amount is the event's amount (see the Event constants).
	Amount decimal.Decimal `json:"amount"`
	// ReservationID is the hold of a hold event; "" (absent) otherwise.
	ReservationID string `json:"reservation_id,omitempty"`
	// GrantID is the grant of a granted or revoked entry; "" (absent)
	// otherwise.
	GrantID string `json:"grant_id,omitempty"`
	// Meta is what the caller said of the event; absent when nothing.
	Meta Meta `json:"meta,omitempty"`
	// ShadowDenied marks a fillup or reserved entry that a shadow-mode limit
	// with record_denials accepted although enforce would have denied it;
	// absent (false) otherwise.
	ShadowDenied bool `json:"shadow_denied,omitempty"`
}

// LevelPoint is one point of a LevelSeries: the bucket's level and held
// amount at At. A point with an Event is the bucket just after that history
// event; the point before it, at the same instant, is the bucket just before.
type LevelPoint struct {
	// At is the instant of the point.
	At Time `json:"at"`
	// Level is the bucket's level at At, holds not included.
	Level decimal.Decimal `json:"level"`
	// Held is the sum of the holds active at At.
	Held decimal.Decimal `json:"held"`
	// Event is the history event this point is just after; "" (absent)
	// for a sample, a period start or the instant the bucket leaks empty.
	Event Event `json:"event,omitempty"`
}

// LevelSeries is a bucket's level over time, replayed by budgetd from the
// bucket's history with the bucket rule: GET …/buckets/{key}/levels. A line
// through Items in order draws the level exactly.
type LevelSeries struct {
	// Items are the points, oldest first.
	Items []LevelPoint `json:"items"`
	// Capacity is the limit's capacity.
	Capacity decimal.Decimal `json:"capacity"`
	// From and To bound the series.
	From Time `json:"from"`
	To   Time `json:"to"`
	// PeriodStart is the start of the period containing To, for a periodic
	// limit; nil for another kind.
	PeriodStart *Time `json:"period_start"`
	// ResetsAt is when the period containing To ends; nil for another kind.
	ResetsAt *Time `json:"resets_at"`
	// Complete reports whether the replay began at the bucket's first
	// history entry; false for a limit with history off (no Items).
	Complete bool `json:"complete"`
}

// Page is one page of a list: GET /v1/limits, …/buckets and …/history.
type Page[T any] struct {
	// Items are the page's items, never null.
	Items []T `json:"items"`
	// NextCursor is the cursor of the next page; nil on the last page.
	NextCursor *string `json:"next_cursor"`
}

// Next returns the next page's cursor, "" on the last page.
func (p Page[T]) Next() string {
	if p.NextCursor == nil {
		return ""
	}
	return *p.NextCursor
}

// ReservationList is the answer of GET …/buckets/{key}/reservations: every
// active hold of the bucket, so there is no next page.
type ReservationList struct {
	// Items are the active holds, oldest first.
	Items []Reservation `json:"items"`
}

// FillupRequest is the body of POST …/buckets/{key}/fillup.
type FillupRequest struct {
	// Cost is what to add to the bucket.
	Cost decimal.Decimal `json:"cost"`
	// Meta is stored on the history entry.
	Meta Meta `json:"meta,omitempty"`
}

// MultiFillupItem is one item of a multi-bucket Fillup.
type MultiFillupItem struct {
	// Limit is the item's limit.
	Limit string `json:"limit"`
	// Key is the item's bucket key.
	Key string `json:"key"`
	// Cost is what to add to the bucket.
	Cost decimal.Decimal `json:"cost"`
	// Meta is stored on the item's history entry.
	Meta Meta `json:"meta,omitempty"`
}

// MultiFillupRequest is the body of POST /v1/fillup: 1–64 items, charged
// all or none.
type MultiFillupRequest struct {
	// Items are the buckets to charge.
	Items []MultiFillupItem `json:"items"`
}

// MultiFillupItemDecision is the decision on one item of a multi-bucket
// Fillup, with its bucket.
type MultiFillupItemDecision struct {
	// Limit is the item's limit.
	Limit string `json:"limit"`
	// Key is the item's bucket key.
	Key string `json:"key"`
	Decision
}

// MultiFillupResult is the answer of POST /v1/fillup (200 accepted, 429
// denied): one decision per item in request order.
type MultiFillupResult struct {
	// Accepted says whether every item was charged.
	Accepted bool `json:"accepted"`
	// Items are the decisions in request order.
	Items []MultiFillupItemDecision `json:"items"`
}

// DrainRequest is the body of POST …/buckets/{key}/drain.
type DrainRequest struct {
	// Amount is what to remove from the level (clamped at zero).
	Amount decimal.Decimal `json:"amount"`
	// Meta is stored on the history entry.
	Meta Meta `json:"meta,omitempty"`
}

// ReserveRequest is the body of POST …/buckets/{key}/reservations.
type ReserveRequest struct {
	// Amount is what to hold.
	Amount decimal.Decimal `json:"amount"`
	// TTL is how long the hold lives unresolved; zero is the server's
	// default (5m).
	TTL Duration `json:"ttl,omitempty"`
	// Meta is stored on the history entry.
	Meta Meta `json:"meta,omitempty"`
}

// CommitRequest is the body of POST /v1/reservations/{id}/commit.
type CommitRequest struct {
	// Amount is what to charge; nil charges the held amount.
	Amount *decimal.Decimal `json:"amount,omitempty"`
	// Overrun allows an Amount above the hold.
	Overrun bool `json:"overrun,omitempty"`
	// Meta is stored on the history entry.
	Meta Meta `json:"meta,omitempty"`
}

// ReleaseRequest is the body of POST /v1/reservations/{id}/release.
type ReleaseRequest struct {
	// Meta is stored on the history entry.
	Meta Meta `json:"meta,omitempty"`
}

// Health is the answer of GET /healthz and /readyz.
type Health struct {
	// Status is "ok" when healthy.
	Status string `json:"status"`
}

// Time is an instant as budgetd writes it: RFC 3339 in UTC with exactly six
// fractional digits ("2026-11-22T14:05:21.656930Z", the Timestamp of the
// OpenAPI document), so a document read and written again is the same bytes.
// It embeds time.Time: t.Before(u.Time), t.Format(…) and t.Time work as
// usual.
type Time struct{ time.Time }

// TimeFormat is the layout of a Time.
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// NewTime returns t as a Time.
func NewTime(t time.Time) Time { return Time{t} }

// OptTime returns t as a *Time, nil when t is the zero time.
func OptTime(t time.Time) *Time {
	if t.IsZero() {
		return nil
	}
	return &Time{t}
}

// String returns the time as budgetd writes it.
func (t Time) String() string { return t.UTC().Format(TimeFormat) }

// MarshalJSON writes the time as budgetd does.
func (t Time) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(TimeFormat)+2)
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, TimeFormat)
	return append(b, '"'), nil
}

// UnmarshalJSON reads an RFC 3339 time (any number of fractional digits).
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a time must be an RFC 3339 JSON string: %w", err)
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = Time{v}
	return nil
}

// Duration is a time.Duration written as a Go duration string without the
// zero units time.Duration.String appends: "720h", "1h30m", "1.5s".
type Duration time.Duration

// String returns the duration as budgetd writes it.
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalJSON writes the duration as a JSON string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a JSON string like \"720h\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// The types of events.
const (
	// EventThresholdCrossed: a write took a bucket's use (level + held) to
	// a threshold it had not reached.
	EventThresholdCrossed = "threshold.crossed"
	// EventThresholdRecovered: a write found a bucket's use below a
	// threshold it had reached (a drain or release, or a leak, expiry,
	// period or window noticed at that write).
	EventThresholdRecovered = "threshold.recovered"
)

// WebhookEvent is an event as GET /v1/events lists it and a webhook
// delivers it: written in the same atomic step as the write that caused it.
type WebhookEvent struct {
	// ID is the store's id of the event (the webhook-id header).
	ID string `json:"id"`
	// Type is EventThresholdCrossed or EventThresholdRecovered.
	Type string `json:"type"`
	// Time is the store's clock at the write.
	Time Time `json:"time"`
	// Limit and Key name the bucket.
	Limit string `json:"limit"`
	Key   string `json:"key"`
	// Threshold is the threshold as the limit lists it.
	Threshold string `json:"threshold"`
	// Used is the bucket's level + held after the write.
	Used decimal.Decimal `json:"used"`
	// Capacity is the bucket's effective capacity at the write.
	Capacity decimal.Decimal `json:"capacity"`
	// PeriodStart is the start of the period of a periodic limit; nil for
	// another kind.
	PeriodStart *Time `json:"period_start"`
}

// NewWebhookEvent returns the event with these fields, as budgetd's
// events listings and its webhooks write it; a zero periodStart is none (a
// limit that is not periodic). The server renders its domain events with
// it, so that package api needs none of budgetd's internal types.
func NewWebhookEvent(id, typ string, at time.Time, limit, key, threshold string, used, capacity decimal.Decimal, periodStart time.Time) WebhookEvent {
	return WebhookEvent{
		ID: id, Type: typ, Time: NewTime(at), Limit: limit, Key: key,
		Threshold: threshold, Used: used, Capacity: capacity, PeriodStart: OptTime(periodStart),
	}
}

// EventPage is a page of GET /v1/events: NextCursor is where to continue
// from, also when Items is empty (poll again with it later): never null,
// since the events are a feed rather than a list that ends, and on an empty
// page the cursor given ("" when none was, which lists from the oldest event
// kept).
type EventPage struct {
	Items      []WebhookEvent `json:"items"`
	NextCursor string         `json:"next_cursor"`
}

// Override is a limit's terms for one key or a key prefix (GET and PUT
// /v1/limits/{name}/overrides/{pattern}, an item of GET …/overrides). The
// fields that are nil come from the limit.
type Override struct {
	// Pattern is a key, or a prefix of keys followed by "*".
	Pattern string `json:"pattern"`
	// Capacity replaces the limit's capacity.
	Capacity *decimal.Decimal `json:"capacity"`
	// Leak replaces a leaky limit's leak rate.
	Leak *Leak `json:"leak"`
	// Period replaces a periodic limit's tz and start_day.
	Period *OverridePeriod `json:"period"`
	// Window replaces a window limit's length (with its default precision).
	Window *OverrideWindow `json:"window"`
	// ExpiresAt is when the override stops applying; nil for never.
	ExpiresAt *Time `json:"expires_at"`
	// CreatedAt is when the override was first put.
	CreatedAt Time `json:"created_at"`
	// UpdatedAt is when the override was last put.
	UpdatedAt Time `json:"updated_at"`
}

// OverridePeriod is the part of a period an override may set.
type OverridePeriod struct {
	// TZ is an IANA time zone name; "" keeps the limit's.
	TZ string `json:"tz,omitempty"`
	// StartDay is the day a period starts on (see Period); nil keeps the
	// limit's.
	StartDay *int `json:"start_day,omitempty"`
}

// OverrideWindow is the part of a window an override may set.
type OverrideWindow struct {
	// Length is the window's length, from 1s to 8760h, with a default
	// precision.
	Length Duration `json:"length"`
}

// OverridePut is the body of PUT /v1/limits/{name}/overrides/{pattern}:
// at least one of the terms, of the limit's own kind.
type OverridePut struct {
	Capacity  *decimal.Decimal `json:"capacity,omitempty"`
	Leak      *Leak            `json:"leak,omitempty"`
	Period    *OverridePeriod  `json:"period,omitempty"`
	Window    *OverrideWindow  `json:"window,omitempty"`
	ExpiresAt *Time            `json:"expires_at,omitempty"`
}

// LimitCounts is GET /v1/limits/{name}/counts: how many buckets the limit
// has and how many active holds they have, counted exactly by the store at
// one instant of its clock.
type LimitCounts struct {
	// Buckets counts the buckets a full listing of GET
	// /v1/limits/{name}/buckets shows: those the store keeps, a bucket that
	// leaked empty included until the store prunes it.
	Buckets int64 `json:"buckets"`
	// ActiveHolds counts the holds of those buckets that are active at At:
	// not committed, released or expired.
	ActiveHolds int64 `json:"active_holds"`
	// At is the store's clock the counts were read at.
	At Time `json:"at"`
}

// BucketEventList is GET /v1/limits/{name}/buckets/{key}/events: the
// bucket's most recent events, newest first.
type BucketEventList struct {
	Items []WebhookEvent `json:"items"`
}

// Grant is a top-up of one bucket's capacity (an item of GET
// …/buckets/{key}/grants): Amount is added to the bucket's capacity from
// CreatedAt until ExpiresAt.
type Grant struct {
	// ID names the grant (DELETE …/grants/{id}).
	ID string `json:"id"`
	// Amount is what the grant adds to the capacity.
	Amount decimal.Decimal `json:"amount"`
	// CreatedAt is when the grant was made.
	CreatedAt Time `json:"created_at"`
	// ExpiresAt is when the grant stops counting.
	ExpiresAt Time `json:"expires_at"`
}

// GrantRequest is the body of POST /v1/limits/{name}/buckets/{key}/grants.
type GrantRequest struct {
	// Amount is added to the bucket's capacity.
	Amount decimal.Decimal `json:"amount"`
	// ExpiresAt is when the grant stops counting; nil for the end of the
	// current period of a periodic limit (required for other kinds).
	ExpiresAt *Time `json:"expires_at,omitempty"`
	// Meta is recorded with the granted history entry.
	Meta Meta `json:"meta,omitempty"`
}

// Granted is the answer to POST …/grants and DELETE …/grants/{id}: the
// grant, the history entry written and the bucket under its new terms.
type Granted struct {
	Grant Grant `json:"grant"`
	// EntryID is the granted or revoked history entry; nil when the limit
	// keeps no history.
	EntryID *string `json:"entry_id"`
	// Bucket is the bucket's state after the change.
	Bucket BucketState `json:"bucket"`
}
