package http

import (
	"net/http"

	"github.com/budgetd/budgetd/api"
	"github.com/labstack/echo/v4"
)

// limitCounts is GET /v1/limits/{name}/counts: the exact number of the
// limit's buckets and of their active holds, at the store's clock
// (ledger.Service.Counts). It writes nothing.
func (s *server) limitCounts(c echo.Context) error {
	name, err := validName(c)
	if err != nil {
		return err
	}
	if _, err := query(c); err != nil {
		return err
	}
	n, err := s.svc.Counts(c.Request().Context(), name)
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, api.LimitCounts{Buckets: n.Buckets, ActiveHolds: n.ActiveHolds, At: api.NewTime(n.At)})
	return nil
}
