package http

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/quota"
	"github.com/labstack/echo/v4"
)

type reserveBody struct {
	Amount jsonAmount   `json:"amount"`
	TTL    jsonDuration `json:"ttl"`
	Meta   jsonMeta     `json:"meta"`
}

func (s *server) reserve(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	var body reserveBody
	if err := readJSON(c, &body); err != nil {
		return err
	}
	amount, err := body.Amount.required("amount")
	if err != nil {
		return err
	}
	ttl, err := body.TTL.parse("ttl", false, ledger.MinTTL, s.maxTTL)
	if err != nil {
		return err
	}
	meta, err := body.Meta.parse("meta")
	if err != nil {
		return err
	}
	idem, err := idempotency(c, bucketScope("reserve", ref), "amount="+amount.String()+";ttl="+ttl.String()+metaCanon(meta))
	if err != nil {
		return err
	}
	res, err := s.svc.Reserve(c.Request().Context(), ref, amount, ttl, idem, meta)
	if err != nil {
		return err
	}
	s.markReplay(c, "reserve", res.Replayed)
	if !res.Replayed {
		s.m.decided(ref.Limit, "reserve", res.Decision, amount, false)
		if res.Decision.ShadowDenied {
			s.m.shadowDenied.WithLabelValues(ref.Limit, "reserve").Inc()
		}
		s.m.holds.WithLabelValues(map[bool]string{true: "reserved", false: "reserve_denied"}[res.Decision.Accepted]).Inc()
	}
	setRateLimit(c, quota.Of(ref.Limit, res.Limit, res.Decision))
	if !res.Decision.Accepted {
		return writeDenied(c, apiDecision(res.Decision, res.EntryID, res.Limit), res.Decision)
	}
	writeJSON(c, http.StatusCreated, echo.MIMEApplicationJSON, apiReserved(res.Reservation, res.Decision, res.EntryID, res.Limit))
	return nil
}

func (s *server) getReservation(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return ledger.ErrReservationNotFound
	}
	if err := s.mayUseHold(c, id); err != nil {
		return err
	}
	r, err := s.svc.Reservation(c.Request().Context(), id)
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiReservation(r))
	return nil
}

type commitBody struct {
	Amount  jsonAmount `json:"amount"`
	Overrun bool       `json:"overrun"`
	Meta    jsonMeta   `json:"meta"`
}

func (s *server) commit(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return ledger.ErrReservationNotFound
	}
	if err := s.mayUseHold(c, id); err != nil {
		return err
	}
	var body commitBody
	if err := readJSON(c, &body); err != nil {
		return err
	}
	amount, err := body.Amount.parse("amount", false)
	if err != nil {
		return err
	}
	canon := "amount=null"
	if amount.Valid {
		canon = "amount=" + amount.Decimal.String()
	}
	meta, err := body.Meta.parse("meta")
	if err != nil {
		return err
	}
	canon += ";overrun=" + strconv.FormatBool(body.Overrun) + metaCanon(meta)
	idem, err := idempotency(c, "commit|"+id, canon)
	if err != nil {
		return err
	}
	res, err := s.svc.Commit(c.Request().Context(), id, amount, body.Overrun, idem, meta)
	return s.writeResolved(c, "commit", res, err)
}

func (s *server) release(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return ledger.ErrReservationNotFound
	}
	if err := s.mayUseHold(c, id); err != nil {
		return err
	}
	var body struct {
		Meta jsonMeta `json:"meta"`
	}
	if err := readJSON(c, &body); err != nil {
		return err
	}
	meta, err := body.Meta.parse("meta")
	if err != nil {
		return err
	}
	idem, err := idempotency(c, "release|"+id, strings.TrimPrefix(metaCanon(meta), ";"))
	if err != nil {
		return err
	}
	res, err := s.svc.Release(c.Request().Context(), id, idem, meta)
	return s.writeResolved(c, "release", res, err)
}

func (s *server) writeResolved(c echo.Context, op string, res ledger.ResolveResult, err error) error {
	s.markReplay(c, op, res.Replayed)
	var ref *ledger.Refusal
	switch {
	case errors.As(err, &ref):
		if !res.Replayed {
			s.m.holds.WithLabelValues(ref.Code).Inc()
		}
	case err == nil && !res.Replayed:
		// A repeated commit or release without an Idempotency-Key, which
		// changes nothing, counts again.
		s.m.holds.WithLabelValues(map[string]string{"commit": "committed", "release": "released"}[op]).Inc()
	}
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiResolved(res))
	return nil
}
