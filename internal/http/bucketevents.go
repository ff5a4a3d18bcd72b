package http

import (
	"net/http"
	"strconv"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// defaultBucketEvents is how many events GET …/events lists without ?limit.
const defaultBucketEvents = 20

// bucketEventList is a bucket's most recent events, newest first.
type bucketEventList struct {
	Items []eventView `json:"items"`
}

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
	n := defaultBucketEvents
	if vs, ok := q["limit"]; ok {
		v, err := strconv.Atoi(vs[0])
		if err != nil || v < 1 || v > ledger.MaxBucketEvents || len(vs[0]) > 3 || vs[0][0] < '0' || vs[0][0] > '9' {
			return invalidRequest("limit", "limit must be a whole number from 1 to "+strconv.Itoa(ledger.MaxBucketEvents))
		}
		n = v
	}
	es, err := s.svc.BucketEvents(c.Request().Context(), ref, n)
	if err != nil {
		return err
	}
	list := bucketEventList{Items: make([]eventView, len(es))}
	for i, e := range es {
		list.Items[i] = viewEvent(e)
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, list)
	return nil
}
