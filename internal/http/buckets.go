package http

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/quota"
	"github.com/labstack/echo/v4"
)

// getBucket is the bucket's state without ?cost=. With ?cost= it is
// CanAccept, exactly as canAccept answers: the form SPEC fixes, kept
// unchanged; openapi.json describes CanAccept as its own operation
// (canAccept) so that each operation has one answer shape. It never writes.
func (s *server) getBucket(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	q, err := query(c)
	if err != nil {
		return err
	}
	if costs, asked := q["cost"]; asked {
		return s.check(c, ref, costs[0])
	}
	b, err := s.svc.Bucket(c.Request().Context(), ref)
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiBucket(b))
	return nil
}

// canAccept is GET …/buckets/{key}/can-accept?cost=: CanAccept, whose
// answer is always a decision (cost is required). It never writes.
func (s *server) canAccept(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	q, err := query(c)
	if err != nil {
		return err
	}
	costs, asked := q["cost"]
	if !asked {
		return &ledger.InvalidError{Code: ledger.CodeInvalidAmount, Field: "cost", Reason: "is required"}
	}
	return s.check(c, ref, costs[0])
}

// check answers CanAccept of cost (the query's text) with a decision,
// always 200.
func (s *server) check(c echo.Context, ref ledger.BucketRef, text string) error {
	cost, err := ledger.ParseAmount("cost", text)
	if err != nil {
		return err
	}
	res, err := s.svc.Check(c.Request().Context(), ref, cost)
	if err != nil {
		return err
	}
	d := res.Decision
	s.m.decided(ref.Limit, "check", d, cost, false)
	setRateLimit(c, quota.Of(ref.Limit, res.Limit, d))
	writeDecision(c, http.StatusOK, d, "", res.Limit)
	return nil
}

type fillupBody struct {
	Cost jsonAmount `json:"cost"`
	Meta jsonMeta   `json:"meta"`
}

func (s *server) fillup(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	var body fillupBody
	if err := readFillupBody(c, &body); err != nil {
		return err
	}
	cost, err := body.Cost.required("cost")
	if err != nil {
		return err
	}
	meta, err := body.Meta.parse("meta")
	if err != nil {
		return err
	}
	var idem ledger.Idempotency
	if c.Request().Header.Get("Idempotency-Key") != "" { // the scope and canonical body only then
		if idem, err = idempotency(c, bucketScope("fillup", ref), "cost="+cost.String()+metaCanon(meta)); err != nil {
			return err
		}
	}
	res, err := s.svc.Fillup(c.Request().Context(), []ledger.Item{{Bucket: ref, Cost: cost, Meta: meta}}, idem)
	if err != nil {
		return err
	}
	s.markReplay(c, "fillup", res.Replayed)
	d := res.Items[0]
	if !res.Replayed {
		s.m.decided(ref.Limit, "fillup", d, cost, true)
	}
	setRateLimit(c, quota.Of(ref.Limit, res.Limits[0], d))
	if !res.Accepted {
		setRetryAfter(c, d)
		writeDecision(c, http.StatusTooManyRequests, d, res.EntryIDs[0], res.Limits[0])
		return nil
	}
	writeDecision(c, http.StatusOK, d, res.EntryIDs[0], res.Limits[0])
	return nil
}

// multiBody is decoded in two steps, the items one by one, so that an error
// names the item it is in (items[2].key). The common body skips both
// (plainItems).
type multiBody struct {
	Items []json.RawMessage `json:"items"`
}

type multiItem struct {
	Limit jsonText   `json:"limit"`
	Key   jsonText   `json:"key"`
	Cost  jsonAmount `json:"cost"`
	Meta  jsonMeta   `json:"meta"`
}

// itemFields names the fields of each item a multi-bucket call may have
// (items[2].cost), made once rather than on every call.
var itemFields = func() (fs [ledger.MaxItems]struct{ prefix, limit, key, cost, meta string }) {
	for i := range fs {
		p := "items[" + strconv.Itoa(i) + "]."
		fs[i].prefix, fs[i].limit, fs[i].key, fs[i].cost, fs[i].meta = p, p+"limit", p+"key", p+"cost", p+"meta"
	}
	return fs
}()

// item checks it, the i-th item of a multi-bucket call; the service
// validates the name and key.
func (it multiItem) item(i int) (ledger.Item, error) {
	at := &itemFields[i]
	limit, err := it.Limit.string(at.limit, ledger.CodeInvalidName)
	if err != nil {
		return ledger.Item{}, err
	}
	key, err := it.Key.string(at.key, ledger.CodeInvalidKey)
	if err != nil {
		return ledger.Item{}, err
	}
	cost, err := it.Cost.required(at.cost)
	if err != nil {
		return ledger.Item{}, err
	}
	meta, err := it.Meta.parse(at.meta)
	if err != nil {
		return ledger.Item{}, err
	}
	return ledger.Item{Bucket: ledger.BucketRef{Limit: limit, Key: key}, Cost: cost, Meta: meta}, nil
}

// plainOrDecoded is the i-th item of a multi-bucket call: plain[i] when
// plainItems read the body, else raw[i] decoded.
func plainOrDecoded(plain []multiItem, raw []json.RawMessage, i int) (multiItem, error) {
	if raw == nil {
		return plain[i], nil
	}
	var it multiItem // declared here: decoding moves it to the heap
	err := decodeStrict(raw[i], &it, itemFields[i].prefix)
	return it, err
}

// commonItems is how many items a multi-bucket call is expected to have at
// most: up to that many, its per-item scratch space needs no allocation.
const commonItems = 8

func (s *server) multiFillup(c echo.Context) error {
	bp, err := readBody(c)
	if err != nil {
		return err
	}
	defer bufPool.Put(bp)
	var plainBuf [commonItems]multiItem
	plain, isPlain := plainItems(string(*bp), plainBuf[:0])
	n := len(plain)
	var raw []json.RawMessage
	if !isPlain {
		var body multiBody // declared here: decoding moves it to the heap
		if err := decodeBody(*bp, &body); err != nil {
			return err
		}
		raw, n = body.Items, len(body.Items)
	}
	if n == 0 || n > ledger.MaxItems {
		return invalidRequest("items", "between 1 and 64 items are allowed")
	}
	items := make([]ledger.Item, n)
	for i := range items {
		it, err := plainOrDecoded(plain, raw, i)
		if err != nil {
			return err
		}
		if items[i], err = it.item(i); err != nil {
			return err
		}
		if err := mayUse(c, items[i].Bucket.Limit, itemFields[i].limit); err != nil {
			return err
		}
	}
	var idem ledger.Idempotency
	if c.Request().Header.Get("Idempotency-Key") != "" { // the canonical body only then
		var canon strings.Builder
		for _, it := range items {
			canon.WriteString(it.Bucket.Limit + "\x00" + it.Bucket.Key + "\x00" + it.Cost.String() + metaCanon(it.Meta) + "\n")
		}
		if idem, err = idempotency(c, "multi-fillup", canon.String()); err != nil {
			return err
		}
	}
	res, err := s.svc.Fillup(c.Request().Context(), items, idem)
	if err != nil {
		return err
	}
	s.markReplay(c, "multi_fillup", res.Replayed)
	if !res.Replayed {
		for i, d := range res.Items {
			s.m.decided(items[i].Bucket.Limit, "multi_fillup", d, items[i].Cost, res.Accepted)
		}
	}
	var qsBuf [commonItems]quota.Quota
	qs := qsBuf[:0]
	for i, d := range res.Items {
		qs = append(qs, quota.Of(items[i].Bucket.Limit, res.Limits[i], d))
	}
	setRateLimit(c, qs...)
	if !res.Accepted {
		setRetryAfter(c, res.Items...)
		writeMulti(c, http.StatusTooManyRequests, items, res)
		return nil
	}
	writeMulti(c, http.StatusOK, items, res)
	return nil
}

type drainBody struct {
	Amount jsonAmount `json:"amount"`
	Meta   jsonMeta   `json:"meta"`
}

func (s *server) drain(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	var body drainBody
	if err := readJSON(c, &body); err != nil {
		return err
	}
	amount, err := body.Amount.required("amount")
	if err != nil {
		return err
	}
	meta, err := body.Meta.parse("meta")
	if err != nil {
		return err
	}
	idem, err := idempotency(c, bucketScope("drain", ref), "amount="+amount.String()+metaCanon(meta))
	if err != nil {
		return err
	}
	res, err := s.svc.Drain(c.Request().Context(), ref, amount, idem, meta)
	if err != nil {
		return err
	}
	s.markReplay(c, "drain", res.Replayed)
	s.audit(c, "drain", slog.String("limit", ref.Limit), slog.String("bucket_key", ref.Key),
		slog.String("amount", amount.String()), slog.String("removed", res.Removed.String()),
		slog.String("level_before", res.Bucket.Level.Decimal().Add(res.Removed).String()), slog.String("level_after", res.Bucket.Level.String()),
		slog.Bool("replayed", res.Replayed))
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiDrained(res))
	return nil
}

func (s *server) history(c echo.Context) error {
	ref, err := bucketRef(c)
	if err != nil {
		return err
	}
	n, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	entries, next, err := s.svc.History(c.Request().Context(), ref, cursor, n)
	if err != nil {
		return err
	}
	writeJSON(c, http.StatusOK, echo.MIMEApplicationJSON, apiPage(entries, next, apiEntry))
	return nil
}

// markReplay tells the client that an answer is a stored one, and counts
// it.
func (s *server) markReplay(c echo.Context, op string, replayed bool) {
	if replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
		s.m.replays.WithLabelValues(op).Inc()
	}
}
