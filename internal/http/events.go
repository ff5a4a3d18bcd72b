package http

import (
	"net/http"

	"github.com/budgetd/budgetd/api"
	"github.com/labstack/echo/v4"
)

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
	page := api.EventPage{Items: make([]api.WebhookEvent, 0, len(es)), NextCursor: next}
	for _, e := range es {
		if k == nil || k.MayUse(e.Bucket.Limit) {
			page.Items = append(page.Items, apiEvent(e))
		}
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, page)
	return nil
}
