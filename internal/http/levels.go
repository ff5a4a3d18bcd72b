package http

import (
	"net/http"
	"strconv"
	"time"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// levelPointView is one point of a level series.
type levelPointView struct {
	At    string `json:"at"`
	Level string `json:"level"`
	Held  string `json:"held"`
	Event string `json:"event,omitempty"`
}

// levelsView is the answer of GET …/buckets/{key}/levels.
type levelsView struct {
	Items       []levelPointView `json:"items"`
	Capacity    string           `json:"capacity"`
	From        string           `json:"from"`
	To          string           `json:"to"`
	PeriodStart *string          `json:"period_start"`
	ResetsAt    *string          `json:"resets_at"`
	Complete    bool             `json:"complete"`
}

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
	v := levelsView{Items: make([]levelPointView, len(ls.Points)), Capacity: ls.Capacity.String(),
		From: formatTime(ls.From), To: formatTime(ls.To), PeriodStart: optTime(ls.PeriodStart), ResetsAt: optTime(ls.ResetsAt),
		Complete: ls.Complete}
	for i, p := range ls.Points {
		v.Items[i] = levelPointView{At: formatTime(p.At), Level: p.Level.String(), Held: p.Held.String(), Event: string(p.Event)}
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, v)
	return nil
}
