package http

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

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
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiPage(items, next, apiListed))
	return nil
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
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiHolds(holds))
	return nil
}
