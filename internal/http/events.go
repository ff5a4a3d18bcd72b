package http

import (
	"net/http"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// eventView is an event as GET /v1/events lists it and a webhook sends it.
type eventView struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Time      string `json:"time"`
	Limit     string `json:"limit"`
	Key       string `json:"key"`
	Threshold string `json:"threshold"`
	// Used is level + held after the write; Capacity the bucket's
	// effective capacity then.
	Used     string `json:"used"`
	Capacity string `json:"capacity"`
	// PeriodStart is the start of the period of a periodic limit, null
	// for another kind.
	PeriodStart *string `json:"period_start"`
}

func viewEvent(e ledger.OutboxEvent) eventView {
	return eventView{
		ID: e.ID, Type: e.Type, Time: formatTime(e.Time), Limit: e.Bucket.Limit, Key: e.Bucket.Key,
		Threshold: e.Threshold, Used: e.Used.String(), Capacity: e.Capacity.String(), PeriodStart: optTime(e.PeriodStart),
	}
}

// eventPage is a page of events: next_cursor is where to continue from,
// also when the page is empty (poll again with it later).
type eventPage struct {
	Items      []eventView `json:"items"`
	NextCursor string      `json:"next_cursor"`
}

// events is GET /v1/events?after=CURSOR&limit=N: the events writes
// emitted, every one once across pages, in order for each bucket. A key
// restricted to some limits sees only theirs.
func (s *server) events(c echo.Context) error {
	n, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	q, _ := query(c)
	if after, ok := q["after"]; ok {
		if cursor != "" && cursor != after[0] {
			return invalidRequest("after", "give the cursor once, as after")
		}
		cursor = after[0]
	}
	if len(cursor) > 64 {
		return invalidRequest("after", "malformed cursor")
	}
	es, next, err := s.svc.Events(c.Request().Context(), cursor, n)
	if err != nil {
		return err
	}
	k := requestKey(c)
	page := eventPage{Items: make([]eventView, 0, len(es)), NextCursor: next}
	for _, e := range es {
		if k == nil || k.MayUse(e.Bucket.Limit) {
			page.Items = append(page.Items, viewEvent(e))
		}
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, page)
	return nil
}
