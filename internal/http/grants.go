package http

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"

	"github.com/budgetd/budgetd/api"
	"github.com/labstack/echo/v4"
)

// grantBody is the body of POST …/grants.
type grantBody struct {
	Amount    jsonAmount      `json:"amount"`
	ExpiresAt json.RawMessage `json:"expires_at"`
	Meta      jsonMeta        `json:"meta"`
}

// addGrant is POST /v1/limits/{name}/buckets/{key}/grants.
func (s *server) addGrant(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	var body grantBody
	if err := readJSON(c, &body); err != nil {
		return err
	}
	amount, err := body.Amount.required("amount")
	if err != nil {
		return err
	}
	// Absent or null is the default (zero for the ledger); an explicit
	// time is never zero (parseExpiresAt refuses the zero instant).
	expiresAt, expires, err := parseExpiresAt(body.ExpiresAt)
	if err != nil {
		return err
	}
	meta, err := body.Meta.parse("meta")
	if err != nil {
		return err
	}
	canon := "amount=" + amount.String()
	if expires {
		canon += ";expires_at=" + api.NewTime(expiresAt).String()
	}
	idem, err := idempotency(c, bucketScope("grant", ref), canon+metaCanon(meta))
	if err != nil {
		return err
	}
	res, err := s.svc.AddGrant(c.Request().Context(), ref, amount, expiresAt, idem, meta)
	if err != nil {
		return err
	}
	s.markReplay(c, "grant", res.Replayed)
	s.audit(c, "grant", slog.String("limit", ref.Limit), slog.String("bucket_key", ref.Key),
		slog.String("grant", res.Grant.ID), slog.String("amount", res.Grant.Amount.String()),
		slog.String("expires_at", api.NewTime(res.Grant.ExpiresAt).String()), slog.Bool("replayed", res.Replayed))
	writeJSON(c, http.StatusCreated, echo.MIMEApplicationJSON, apiGranted(res))
	return nil
}

// listGrants is GET /v1/limits/{name}/buckets/{key}/grants: the bucket's
// active grants, oldest first (few per bucket: one page).
func (s *server) listGrants(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	gs, err := s.svc.ListGrants(c.Request().Context(), ref)
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiPage(gs, "", apiGrant))
	return nil
}

// revokeGrant is DELETE /v1/limits/{name}/buckets/{key}/grants/{id}.
func (s *server) revokeGrant(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	id, err := pathParam(c, "id")
	if err != nil {
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
	idem, err := idempotency(c, bucketScope("revoke", ref)+"|"+id, strings.TrimPrefix(metaCanon(meta), ";"))
	if err != nil {
		return err
	}
	res, err := s.svc.RevokeGrant(c.Request().Context(), ref, id, idem, meta)
	if err != nil {
		return err
	}
	s.markReplay(c, "revoke", res.Replayed)
	s.audit(c, "revoke_grant", slog.String("limit", ref.Limit), slog.String("bucket_key", ref.Key),
		slog.String("grant", res.Grant.ID), slog.String("amount", res.Grant.Amount.String()), slog.Bool("replayed", res.Replayed))
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiGranted(res))
	return nil
}
