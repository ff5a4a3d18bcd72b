package http

import (
	"net/http"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
)

// listBuckets is GET /v1/limits/{name}/buckets?limit=N&cursor=C: the
// limit's buckets in byte order of key, one page at a time; ?above=T keeps
// those whose mark for threshold T is above, ?order=used or share ranks
// them highest first (ledger.QueryBuckets). It writes nothing.
func (s *server) listBuckets(c echo.Context) error {
	name, err := validName(c)
	if err != nil {
		return err
	}
	n, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	q, err := bucketQuery(c)
	if err != nil {
		return err
	}
	items, next, err := s.svc.QueryBuckets(c.Request().Context(), name, q, cursor, n)
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

// bucketQuery reads ?above and ?order of a bucket listing: each, when
// present, must not be empty.
func bucketQuery(c echo.Context) (ledger.BucketQuery, error) {
	q, err := query(c)
	if err != nil {
		return ledger.BucketQuery{}, err
	}
	var out ledger.BucketQuery
	if vs, ok := q["above"]; ok {
		if out.Above = vs[0]; out.Above == "" {
			return out, invalidRequest("above", "above names one of the limit's thresholds, as \"80%\" or an amount")
		}
	}
	if vs, ok := q["order"]; ok {
		switch o := api.BucketOrder(vs[0]); o {
		case api.OrderKey, api.OrderUsed, api.OrderShare:
			out.Order = ledger.BucketOrder(o)
		default:
			return out, invalidRequest("order", "order is key, used or share")
		}
	}
	return out, nil
}
