package http

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/quota"
	"github.com/labstack/echo/v4"
)

// writeJSON writes v with the given status and content type.
func writeJSON(c echo.Context, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, status, contentType = []byte(`{"code":"`+string(api.CodeInternal)+`"}`), http.StatusInternalServerError, "application/problem+json"
	}
	_ = c.Blob(status, contentType, append(b, '\n'))
}

// bufPool holds the buffers answers are encoded into.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeDecision answers with one decision as JSON: what writeJSON writes of
// apiDecision(d, entryID, terms), byte for byte (TestAppendDecisionIsTheAPIType), encoded without reflection into a
// pooled buffer (the answer of every single-bucket Fillup and CanAccept).
func writeDecision(c echo.Context, status int, d bucket.Decision, entryID string, terms ledger.Limit) {
	bp := bufPool.Get().(*[]byte)
	b := append(appendDecision((*bp)[:0], d, entryID, terms), '\n')
	_ = c.Blob(status, echo.MIMEApplicationJSON, b)
	*bp = b
	bufPool.Put(bp)
}

// appendDecision appends the JSON of apiDecision(d, entryID, terms).
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

// appendOptTime appends the JSON of api.OptTime(t).
func appendOptTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	return append(t.UTC().AppendFormat(append(b, '"'), api.TimeFormat), '"')
}

// retryAfterHeader is the Retry-After header for a denial: retry_after
// rounded up to whole seconds and clamped to quota.MaxInt, "" when the cost
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
	return headerInt(quota.Clamp(most.CeilSeconds()))
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
