package http

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// timeFormat is RFC 3339 in UTC with exactly six fractional digits.
const timeFormat = "2006-01-02T15:04:05.000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

// optTime is a time that is null when zero.
func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := formatTime(t)
	return &s
}

// formatDuration writes a duration as Go does, without the zero minutes and
// seconds that time.Duration.String appends: "720h", "1h30m", "1.5s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// writeJSON writes v with the given status and content type.
func writeJSON(c echo.Context, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, status, contentType = []byte(`{"code":"`+string(api.CodeInternal)+`"}`), http.StatusInternalServerError, "application/problem+json"
	}
	_ = c.Blob(status, contentType, append(b, '\n'))
}

// decisionView is a decision as clients read it. retry_after is null when
// accepted or when the cost never fits.
type decisionView struct {
	Accepted   bool    `json:"accepted"`
	Level      string  `json:"level"`
	Held       string  `json:"held"`
	Remaining  string  `json:"remaining"`
	Capacity   string  `json:"capacity"`
	RetryAfter *string `json:"retry_after"`
	NeverFits  bool    `json:"never_fits"`
	// PeriodStart and ResetsAt bound the current period of a periodic
	// limit; null for a leaky one.
	PeriodStart *string `json:"period_start"`
	ResetsAt    *string `json:"resets_at"`
	// EntryID is the history entry the call wrote, null for none (and for
	// CanAccept, which writes nothing).
	EntryID *string `json:"entry_id"`
	// ShadowDenied and OverCapacity mark a cost accepted above capacity by
	// a shadow or a soft limit.
	ShadowDenied bool `json:"shadow_denied"`
	OverCapacity bool `json:"over_capacity"`
	// Override is the pattern of the override that applied, null for none.
	Override *string `json:"override"`
	// Grants is the sum of the bucket's active grants, included in
	// capacity ("0" for none).
	Grants string `json:"grants"`
	// Rollover is the rollover the bucket received in the current period,
	// included in capacity ("0" for none).
	Rollover string `json:"rollover"`
}

// viewDecision is d as clients read it, with the id of the history entry
// the call wrote ("" for none) and the terms it was made under (the
// override that applied and the active grants).
func viewDecision(d bucket.Decision, entryID string, terms ledger.Limit) decisionView {
	v := decisionView{
		Accepted:  d.Accepted,
		Level:     d.Level.String(),
		Held:      d.Held.String(),
		Remaining: d.Remaining.String(),
		Capacity:  d.Capacity.String(),
		NeverFits: d.NeverFits,

		PeriodStart: optTime(d.PeriodStart),
		ResetsAt:    optTime(d.ResetsAt),
		EntryID:     optString(entryID),

		ShadowDenied: d.ShadowDenied,
		OverCapacity: d.OverCapacity,
		Override:     optString(terms.Override),
		Grants:       terms.Grants.String(),
		Rollover:     terms.Received.String(),
	}
	if !d.Accepted && !d.NeverFits {
		s := d.RetryAfter.String()
		v.RetryAfter = &s
	}
	return v
}

// bufPool holds the buffers answers are encoded into.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// optString is s, nil when empty.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// writeDecision answers with one decision as JSON: what writeJSON writes of
// viewDecision(d, entryID, terms), byte for byte, encoded without reflection into a
// pooled buffer (the answer of every single-bucket Fillup and CanAccept).
func writeDecision(c echo.Context, status int, d bucket.Decision, entryID string, terms ledger.Limit) {
	bp := bufPool.Get().(*[]byte)
	b := append(appendDecision((*bp)[:0], d, entryID, terms), '\n')
	_ = c.Blob(status, echo.MIMEApplicationJSON, b)
	*bp = b
	bufPool.Put(bp)
}

// appendDecision appends the JSON of viewDecision(d, entryID, terms).
func appendDecision(b []byte, d bucket.Decision, entryID string, terms ledger.Limit) []byte {
	b = append(b, `{"accepted":`...)
	b = strconv.AppendBool(b, d.Accepted)
	b = append(b, `,"level":"`...)
	b = d.Level.Append(b)
	b = append(b, `","held":"`...)
	b = d.Held.Append(b)
	b = append(b, `","remaining":"`...)
	b = d.Remaining.Append(b)
	b = append(b, `","capacity":"`...)
	b = d.Capacity.Append(b)
	b = append(b, `","retry_after":`...)
	if !d.Accepted && !d.NeverFits {
		b = append(d.RetryAfter.Append(append(b, '"')), '"')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"never_fits":`...)
	b = strconv.AppendBool(b, d.NeverFits)
	b = append(b, `,"period_start":`...)
	b = appendOptTime(b, d.PeriodStart)
	b = append(b, `,"resets_at":`...)
	b = appendOptTime(b, d.ResetsAt)
	b = append(b, `,"entry_id":`...)
	if entryID == "" {
		b = append(b, "null"...)
	} else {
		// Entry ids are store-made digits and letters: nothing to escape.
		b = append(append(append(b, '"'), entryID...), '"')
	}
	b = append(b, `,"shadow_denied":`...)
	b = strconv.AppendBool(b, d.ShadowDenied)
	b = append(b, `,"over_capacity":`...)
	b = strconv.AppendBool(b, d.OverCapacity)
	b = append(b, `,"override":`...)
	if terms.Override == "" {
		b = append(b, "null"...)
	} else {
		b = appendMarshalString(b, terms.Override)
	}
	b = append(b, `,"grants":"`...)
	if terms.Grants.Sign() == 0 {
		b = append(b, '0')
	} else {
		b = append(b, terms.Grants.String()...)
	}
	b = append(b, `","rollover":"`...)
	if terms.Received.Sign() == 0 {
		b = append(b, '0')
	} else {
		b = append(b, terms.Received.String()...)
	}
	return append(b, `"}`...)
}

// writeMulti answers a multi-bucket Fillup of items with res: package api's
// MultiFillupResult, each item's decision written as writeDecision writes
// one, into a pooled buffer (TestAppendMultiIsTheAPIType).
func writeMulti(c echo.Context, status int, items []ledger.Item, res ledger.FillupResult) {
	bp := bufPool.Get().(*[]byte)
	b := append(appendMulti((*bp)[:0], items, res), '\n')
	_ = c.Blob(status, echo.MIMEApplicationJSON, b)
	*bp = b
	bufPool.Put(bp)
}

// appendMulti appends the JSON of the answer to a multi-bucket Fillup.
func appendMulti(b []byte, items []ledger.Item, res ledger.FillupResult) []byte {
	b = append(b, `{"accepted":`...)
	b = strconv.AppendBool(b, res.Accepted)
	b = append(b, `,"items":[`...)
	for i, d := range res.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"limit":`...)
		b = appendMarshalString(b, items[i].Bucket.Limit)
		b = append(b, `,"key":`...)
		b = appendMarshalString(b, items[i].Bucket.Key)
		b = append(b, ',')
		// The decision's members follow in the same object: its JSON
		// without the opening brace.
		at := len(b)
		b = appendDecision(b, d, res.EntryIDs[i], res.Limits[i])
		b = append(b[:at], b[at+1:]...)
	}
	return append(b, "]}"...)
}

// appendMarshalString appends s as encoding/json writes a string (HTML
// escaping included, unlike appendJSONString of the access log): as it is
// when nothing in it needs escaping (limit names never do, keys rarely),
// else through encoding/json.
func appendMarshalString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// appendOptTime appends the JSON of optTime(t).
func appendOptTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	return append(t.UTC().AppendFormat(append(b, '"'), timeFormat), '"')
}

// retryAfterHeader is the Retry-After header for a denial: retry_after
// rounded up to whole seconds and clamped to maxHeaderInt, "" when the cost
// never fits.
func retryAfterHeader(ds ...bucket.Decision) string {
	var most bucket.Micros
	for _, d := range ds {
		if d.Accepted {
			continue
		}
		if d.NeverFits {
			return ""
		}
		if d.RetryAfter.Cmp(most) > 0 {
			most = d.RetryAfter
		}
	}
	return headerInt(clampHeader(most.CeilSeconds()))
}

// setRetryAfter sets the Retry-After of a denial (none when a cost never
// fits).
func setRetryAfter(c echo.Context, ds ...bucket.Decision) {
	if h := retryAfterHeader(ds...); h != "" {
		c.Response().Header()["Retry-After"] = []string{h}
	}
}

// writeDenied answers a Reserve that was denied: 429 with the decision as
// plain JSON and Retry-After unless the amount never fits. The RateLimit
// fields are set by the caller (setRateLimit).
func writeDenied(c echo.Context, body any, ds ...bucket.Decision) error {
	setRetryAfter(c, ds...)
	writeJSON(c, http.StatusTooManyRequests, echo.MIMEApplicationJSON, body)
	return nil
}

// bucketView is a bucket's state without a cost.
type bucketView struct {
	Level     string  `json:"level"`
	Held      string  `json:"held"`
	Remaining string  `json:"remaining"`
	Capacity  string  `json:"capacity"`
	UpdatedAt *string `json:"updated_at"`

	PeriodStart *string `json:"period_start"`
	ResetsAt    *string `json:"resets_at"`
	Override    *string `json:"override"`
	Grants      string  `json:"grants"`
	Rollover    string  `json:"rollover"`
}

func viewBucket(b ledger.BucketState) bucketView {
	return bucketView{
		Level:     b.Level.String(),
		Held:      b.Held.String(),
		Remaining: b.Remaining.String(),
		Capacity:  b.Capacity.String(),
		UpdatedAt: optTime(b.UpdatedAt),

		PeriodStart: optTime(b.PeriodStart),
		ResetsAt:    optTime(b.ResetsAt),
		Override:    optString(b.Override),
		Grants:      b.Grants.String(),
		Rollover:    b.Rollover.String(),
	}
}

// reservationView is a hold.
type reservationView struct {
	ID              string  `json:"id"`
	Limit           string  `json:"limit"`
	Key             string  `json:"key"`
	State           string  `json:"state"`
	Amount          string  `json:"amount"`
	CommittedAmount *string `json:"committed_amount"`
	CreatedAt       string  `json:"created_at"`
	ExpiresAt       string  `json:"expires_at"`
	ResolvedAt      *string `json:"resolved_at"`
}

func viewReservation(r ledger.Reservation) reservationView {
	v := reservationView{
		ID:         r.ID,
		Limit:      r.Bucket.Limit,
		Key:        r.Bucket.Key,
		State:      string(r.State),
		Amount:     r.Amount.String(),
		CreatedAt:  formatTime(r.CreatedAt),
		ExpiresAt:  formatTime(r.ExpiresAt),
		ResolvedAt: optTime(r.ResolvedAt),
	}
	if r.State == ledger.Expired {
		v.ResolvedAt = optTime(r.ExpiresAt)
	}
	if r.CommittedAmount.Valid {
		s := r.CommittedAmount.Decimal.String()
		v.CommittedAmount = &s
	}
	return v
}

// limitView is a limit document: exactly one of leak and period is set, the
// other is null.
type limitView struct {
	Name     string      `json:"name"`
	Capacity string      `json:"capacity"`
	Leak     *leakView   `json:"leak"`
	Period   *periodView `json:"period"`
	Window   *windowView `json:"window"`
	History  bool        `json:"history"`
	// RecordDenials: a denial writes a denied history entry.
	RecordDenials bool `json:"record_denials"`
	// Mode is enforce, shadow or soft; Grace ("10%") is null unless soft.
	Mode  string  `json:"mode"`
	Grace *string `json:"grace"`
	// Thresholds are the limit's thresholds as written: "80%", "4500".
	Thresholds []string `json:"thresholds"`
	// Rollover is the rollover of a periodic limit, null for none.
	Rollover  *rolloverView `json:"rollover"`
	CreatedAt string        `json:"created_at"`
	UpdatedAt string        `json:"updated_at"`
}

// rolloverView is a limit's rollover: at most max of the capacity left
// unused in a period is carried into the next.
type rolloverView struct {
	Max string `json:"max"`
}

// windowView is a rolling window with the precision in force.
type windowView struct {
	Length    string `json:"length"`
	Precision string `json:"precision"`
}

type leakView struct {
	Amount string `json:"amount"`
	Per    string `json:"per"`
}

// periodView is a calendar period; start_day is null for day and year.
type periodView struct {
	Every    string `json:"every"`
	TZ       string `json:"tz"`
	StartDay *int   `json:"start_day"`
}

func viewLimit(l ledger.Limit) limitView {
	v := limitView{
		Name:          l.Name,
		Capacity:      l.Capacity.String(),
		History:       l.History,
		RecordDenials: l.RecordDenials,
		Mode:          cmp.Or(l.Mode, ledger.ModeEnforce),
		Thresholds:    make([]string, len(l.Thresholds)),
		CreatedAt:     formatTime(l.CreatedAt),
		UpdatedAt:     formatTime(l.UpdatedAt),
	}
	if l.Mode == ledger.ModeSoft {
		g := l.Grace.String() + "%"
		v.Grace = &g
	}
	for i, t := range l.Thresholds {
		v.Thresholds[i] = t.String()
	}
	if l.Period != nil {
		p := periodView{Every: l.Period.Every, TZ: l.Period.TZ}
		if sd := l.Period.StartDay; sd != 0 {
			p.StartDay = &sd
		}
		v.Period = &p
	} else if w := l.Window; w != nil {
		v.Window = &windowView{Length: formatDuration(w.Length), Precision: formatDuration(w.Precision)}
	} else {
		v.Leak = &leakView{Amount: l.LeakAmount.String(), Per: formatDuration(l.LeakPer)}
	}
	if l.Rollover != nil {
		v.Rollover = &rolloverView{Max: l.Rollover.Max.String()}
	}
	return v
}

// entryView is one history entry.
type entryView struct {
	ID            string `json:"id"`
	Time          string `json:"time"`
	Event         string `json:"event"`
	Amount        string `json:"amount"`
	ReservationID string `json:"reservation_id,omitempty"`
	GrantID       string `json:"grant_id,omitempty"`
	// Meta is what the caller said of the event; absent when nothing.
	Meta map[string]string `json:"meta,omitempty"`
	// ShadowDenied: see api.HistoryEntry.
	ShadowDenied bool `json:"shadow_denied,omitempty"`
}

func viewEntry(e ledger.Entry) entryView {
	return entryView{ID: e.ID, Time: formatTime(e.Time), Event: string(e.Event), Amount: e.Amount.String(), ReservationID: e.ReservationID, GrantID: e.GrantID, Meta: e.Meta, ShadowDenied: e.ShadowDenied}
}

// page is one page of a list.
type page[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func newPage[T any](items []T, next string) page[T] {
	p := page[T]{Items: items}
	if p.Items == nil {
		p.Items = []T{}
	}
	if next != "" {
		p.NextCursor = &next
	}
	return p
}
