package http

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// listedBucketView is one bucket of GET /v1/limits/{name}/buckets.
type listedBucketView struct {
	Key string `json:"key"`
	bucketView
}

// listBuckets is GET /v1/limits/{name}/buckets?limit=N&cursor=C: the
// limit's buckets in byte order of key, one page at a time. It writes
// nothing.
func (s *server) listBuckets(c echo.Context) error {
	name, err := validName(c)
	if err != nil {
		return err
	}
	n, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	items, next, err := s.svc.ListBuckets(c.Request().Context(), name, cursor, n)
	if err != nil {
		return err
	}
	views := make([]listedBucketView, len(items))
	for i, b := range items {
		views[i] = listedBucketView{Key: b.Key, bucketView: viewBucket(b.BucketState)}
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, newPage(views, next))
	return nil
}

// holdsView is the answer of GET …/buckets/{key}/reservations: every active
// hold of the bucket (at most ledger.MaxHolds), so there is no next page.
type holdsView struct {
	Items []reservationView `json:"items"`
}

// listHolds is GET /v1/limits/{name}/buckets/{key}/reservations: the
// bucket's active holds, oldest first. It writes nothing.
func (s *server) listHolds(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	if _, err := query(c); err != nil {
		return err
	}
	holds, err := s.svc.ListHolds(c.Request().Context(), ref)
	if err != nil {
		return err
	}
	v := holdsView{Items: make([]reservationView, len(holds))}
	for i, r := range holds {
		v.Items[i] = viewReservation(r)
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, v)
	return nil
}
