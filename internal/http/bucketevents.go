package http

import (
	"net/http"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// defaultBucketEvents is how many events GET …/events lists without ?limit.
const defaultBucketEvents = 20

// bucketEvents is GET /v1/limits/{name}/buckets/{key}/events?limit=N: the
// bucket's most recent threshold events (at most ledger.MaxBucketEvents),
// newest first, as GET /v1/events lists them. It is the dashboard's view of
// a bucket; a consumer that must see every event reads /v1/events.
func (s *server) bucketEvents(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	q, err := query(c)
	if err != nil {
		return err
	}
	n, err := limitParam(q, defaultBucketEvents, ledger.MaxBucketEvents)
	if err != nil {
		return err
	}
	es, err := s.svc.BucketEvents(c.Request().Context(), ref, n)
	if err != nil {
		return err
	}
	list := api.BucketEventList{Items: make([]api.WebhookEvent, len(es))}
	for i, e := range es {
		list.Items[i] = apiEvent(e)
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, list)
	return nil
}
