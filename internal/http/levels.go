package http

import (
	"net/http"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// levels is a bucket's level over time, replayed from its history by the
// rule in Go, for the dashboard's plot (docs/api.md).
func (s *server) levels(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	q, err := query(c)
	if err != nil {
		return err
	}
	var lq ledger.LevelQuery
	if vs, ok := q["points"]; ok {
		v, err := strconv.Atoi(vs[0])
		if err != nil || len(vs[0]) > 4 || vs[0][0] < '0' || vs[0][0] > '9' || v < 2 || v > ledger.MaxLevelPoints {
			return invalidRequest("points", "points must be a whole number from 2 to 1000")
		}
		lq.Points = v
	}
	for _, f := range []struct {
		name string
		to   *time.Time
	}{{"from", &lq.From}, {"to", &lq.To}} {
		if vs, ok := q[f.name]; ok {
			t, err := time.Parse(time.RFC3339Nano, vs[0])
			if err != nil || t.Year() < 1970 {
				return invalidRequest(f.name, f.name+" must be an RFC 3339 time, such as 2026-01-31T23:00:00Z")
			}
			*f.to = t.Truncate(time.Microsecond)
		}
	}
	ls, err := s.svc.Levels(c.Request().Context(), ref, lq)
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiLevels(ls))
	return nil
}
