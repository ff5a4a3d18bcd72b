package http

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/budgetd/budgetd/internal/auth"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Context keys set by the middleware.
const (
	ctxKey = "budgetd.key" // *auth.Key of an authenticated request
)

// headerRequestID is the request id header, read and always written.
const headerRequestID = "X-Request-Id"

// maxRequestID is the longest caller's request id kept.
const maxRequestID = 128

// validRequestID reports whether a caller's id is 1–128 characters of
// [A-Za-z0-9._:-], the only ids budgetd repeats (and logs).
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// requestIDs makes the ids of requests that bring none: a random prefix
// per process and a counter, so that ids are unique within a process and,
// but for a 2^-48 chance per pair of processes, across them. They are
// labels for logs, not secrets: a caller may see the next one coming.
var requestIDs = func() (g struct {
	prefix [6]byte
	n      atomic.Uint64
}) {
	_, _ = rand.Read(g.prefix[:])
	var start [8]byte
	_, _ = rand.Read(start[:])
	g.n.Store(binary.BigEndian.Uint64(start[:]))
	return
}()

// newRequestID returns 24 hex digits: the process's prefix, then the low
// 48 bits of its counter.
func newRequestID() string {
	var b [12]byte
	copy(b[:6], requestIDs.prefix[:])
	n := requestIDs.n.Add(1)
	for i := 11; i >= 6; i-- {
		b[i] = byte(n)
		n >>= 8
	}
	var h [24]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}

// requestID puts an X-Request-Id on every answer: the caller's when it is
// well formed, otherwise a new one. The answer's header is where the rest
// of the chain reads it (requestIDOf).
func requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(headerRequestID)
		if !validRequestID(id) {
			id = newRequestID()
		}
		c.Response().Header()[headerRequestID] = []string{id}
		return next(c)
	}
}

// requestIDOf is the request's id as its answer carries it, nil before
// requestID ran (as slog writes a missing id).
func requestIDOf(c echo.Context) any {
	if id := requestIDText(c); id != "" {
		return id
	}
	return nil
}

// requestIDText is requestIDOf without the interface (and its allocation):
// "" before requestID ran.
func requestIDText(c echo.Context) string {
	if v := c.Response().Header()[headerRequestID]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// headKey marks a HEAD request that is served as a GET.
type headKey struct{}

// headAsGet answers HEAD on every GET route, as load balancers probe: the
// request is routed as a GET and net/http drops the body, since the
// connection's request is still a HEAD.
func headAsGet(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			h.ServeHTTP(w, r)
			return
		}
		g := r.WithContext(context.WithValue(r.Context(), headKey{}, true))
		g.Method = http.MethodGet
		h.ServeHTTP(w, g)
	})
}

// requestMethod is the method the client sent, HEAD included.
func requestMethod(r *http.Request) string {
	if r.Context().Value(headKey{}) != nil {
		return http.MethodHead
	}
	return r.Method
}

// knownMethods are the methods that keep their name in metrics; any other
// is "other", so invented methods cannot grow the series without bound.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodDelete: true, http.MethodPatch: true, http.MethodOptions: true,
}

// observe writes the access-log line and the request metrics of each
// request: method, route template (never the query, which may hold a
// misplaced token, nor the path, which holds bucket keys, unless
// WithLogKeys), status, duration, request id and key name.
func (s *server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			var ae *authError
			switch {
			case errors.Is(err, ledger.ErrIdempotencyInFlight):
				s.m.inFlight.Inc()
			case errors.As(err, &ae):
				s.m.authFailures.WithLabelValues(ae.reason).Inc()
			}
			c.Error(err)
		}
		end := time.Now()
		elapsed := end.Sub(start)
		r := c.Request()
		method, route := requestMethod(r), c.Path()
		if !s.routeSet[route] {
			route = "other"
		}
		status := c.Response().Status
		mlabel := method
		if !knownMethods[mlabel] {
			mlabel = "other"
		}
		s.requestObserver(mlabel, route, status).Observe(elapsed.Seconds())
		if s.access == nil {
			return nil
		}
		keyName := "-"
		if k, ok := c.Get(ctxKey).(*auth.Key); ok {
			keyName = k.Name
		}
		id := requestIDText(c)
		if len(method) > 16 {
			method = method[:16] + "…"
		}
		line := accessLine{time: end, method: method, route: route, status: status, duration: elapsed,
			requestID: id, hasID: id != "", key: keyName, path: r.URL.Path, withPath: s.logKeys}
		if s.tracer != nil {
			line.traceID = trace.SpanContextFromContext(r.Context()).TraceID()
		}
		s.access.log(&line)
		return nil
	}
}

// observerKey names one series of budgetd_http_request_duration_seconds:
// method and route label as observe bounds them, and the status code (0
// for the codes labelled "other").
type observerKey struct {
	method, route string
	status        int
}

// requestObserver is the series of budgetd_http_request_duration_seconds
// for a request, kept in s.observers (package series): the labels are
// bounded (known methods, routes, codes 100–599).
func (s *server) requestObserver(method, route string, status int) prometheus.Observer {
	if status < 100 || status > 599 {
		status = 0 // statusLabel's "other": one key for them all
	}
	return s.observers.Get(observerKey{method, route, status}, func() prometheus.Observer {
		return s.m.requests.WithLabelValues(method, route, statusLabel(status))
	})
}

// statusLabel is the status code as a metric label; codes outside 100–599
// cannot occur from net/http but would be "other".
func statusLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return statusLabels[code-100]
}

// statusLabels holds the labels of the codes 100–599, made once.
var statusLabels = func() (l [500]string) {
	for i := range l {
		l[i] = strconv.Itoa(100 + i)
	}
	return l
}()

// publicRoute reports whether a route needs no token: the probes, the API
// description, the dashboard's static files and / (a redirect to them).
func publicRoute(route string) bool {
	switch route {
	case "/", "/healthz", "/readyz", "/openapi.json":
		return true
	}
	return strings.HasPrefix(route, "/ui")
}

// chargeRoutes are the POST routes the charge scope allows; every other
// POST, PUT or DELETE (Drain, limits) needs admin.
var chargeRoutes = map[string]bool{
	"/v1/limits/:name/buckets/:key/fillup":       true,
	"/v1/limits/:name/buckets/:key/reservations": true,
	"/v1/fillup":                   true,
	"/v1/reservations/:id/commit":  true,
	"/v1/reservations/:id/release": true,
}

// scopeFor is the scope a request needs: read to look, charge to spend,
// admin for everything else (limits, Drain, and any route not listed here).
func scopeFor(method, route string) auth.Scope {
	switch {
	case method == http.MethodGet || method == http.MethodHead:
		return auth.Read
	case method == http.MethodPost && chargeRoutes[route]:
		return auth.Charge
	}
	return auth.Admin
}

// tokenParams are query parameters that carry a token by convention; a
// request with one is refused, so that a token never sits in a URL (and in
// every proxy's log).
// Names are compared without regard to case (Access_Token too).
var tokenParams = []string{"access_token", "token", "api_key", "apikey"}

// tokenParam reports whether the query parameter name is one of
// tokenParams in any case.
func tokenParam(name string) bool {
	for _, p := range tokenParams {
		if strings.EqualFold(name, p) {
			return true
		}
	}
	return false
}

// everyLimit reports whether k may act on every limit: unrestricted, or
// restricted by the pattern "*" that matches every name.
func everyLimit(k *auth.Key) bool {
	return k.AllLimits() || slices.Contains(k.Limits, "*")
}

// authError is a 401 or 403 with the reason counted in metrics.
type authError struct {
	status int
	reason string // missing, malformed, unknown, query, scope, limit
	detail string
	field  string
}

func (e *authError) Error() string { return e.detail }

func unauthorized(reason, detail string) *authError {
	return &authError{status: http.StatusUnauthorized, reason: reason, detail: detail}
}

func forbidden(reason, detail string) *authError {
	return &authError{status: http.StatusForbidden, reason: reason, detail: detail}
}

// authenticate is the authentication middleware (echo's key-auth reading
// `Authorization: Bearer TOKEN`) followed by the scope and path-limit
// checks, all before any handler reads the body.
func (s *server) authenticate() echo.MiddlewareFunc {
	keyAuth := middleware.KeyAuthWithConfig(middleware.KeyAuthConfig{
		KeyLookup:  "header:" + echo.HeaderAuthorization,
		AuthScheme: "Bearer",
		Skipper:    func(c echo.Context) bool { return publicRoute(c.Path()) },
		Validator: func(token string, c echo.Context) (bool, error) {
			k, ok := s.keys().Authenticate(token)
			if ok {
				c.Set(ctxKey, k)
			}
			return ok, nil
		},
		ErrorHandler: func(err error, c echo.Context) error {
			var missing *middleware.ErrKeyAuthMissing
			switch {
			case !errors.As(err, &missing):
				return unauthorized("unknown", "the bearer token is not known")
			case c.Request().Header.Get(echo.HeaderAuthorization) == "":
				return unauthorized("missing", "send Authorization: Bearer TOKEN")
			}
			return unauthorized("malformed", "the Authorization header must be Bearer TOKEN")
		},
	})
	check := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			route := c.Path()
			if publicRoute(route) {
				return next(c)
			}
			k := c.Get(ctxKey).(*auth.Key)
			if want := scopeFor(c.Request().Method, route); !k.Allows(want) {
				return forbidden("scope", "the key "+k.Name+" does not have the "+want.String()+" scope")
			}
			if route == "/metrics" && !everyLimit(k) {
				// The series name every limit and carry its counts and
				// spend: only a key allowed every limit may read them.
				return forbidden("limit", "the key "+k.Name+" may act on some limits only, and /metrics describes every limit: scrape with a key allowed every limit")
			}
			if name := c.Param("name"); name != "" && !k.AllLimits() {
				if n, err := pathParam(c, "name"); err != nil || !k.MayUse(n) {
					return forbidden("limit", "the key "+k.Name+" may not act on this limit")
				}
			}
			return next(c)
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if s.keys == nil {
			return next // echo applies middleware on every request: nothing to build
		}
		authed := keyAuth(check(next))
		return func(c echo.Context) error {
			r := c.Request()
			if len(r.Header.Values(echo.HeaderAuthorization)) > 1 {
				// A proxy that checks one of them would see another caller
				// than budgetd acts as: refuse before anything else.
				return &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: echo.HeaderAuthorization, Reason: "send one Authorization header, not several"}
			}
			for p := range r.URL.Query() {
				if tokenParam(p) {
					return unauthorized("query", "a token is never accepted in the URL, where logs keep it: send Authorization: Bearer TOKEN, and replace the token you sent")
				}
			}
			return authed(c)
		}
	}
}

// requestKey is the key of an authenticated request, nil when
// authentication is off.
func requestKey(c echo.Context) *auth.Key {
	k, _ := c.Get(ctxKey).(*auth.Key)
	return k
}

// mayUse refuses, with 403, a key restricted to other limits. field names
// the input that named the limit (items[2].limit), if any.
func mayUse(c echo.Context, limit, field string) error {
	k := requestKey(c)
	if k == nil || k.MayUse(limit) {
		return nil
	}
	e := forbidden("limit", "the key "+k.Name+" may not act on the limit "+limit)
	e.field = field
	return e
}

// mayUseHold checks the right on a hold's limit before a read, commit or
// release; it costs a lookup only for keys restricted to some limits.
func (s *server) mayUseHold(c echo.Context, id string) error {
	k := requestKey(c)
	if k == nil || k.AllLimits() {
		return nil
	}
	r, err := s.svc.Reservation(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return mayUse(c, r.Bucket.Limit, "")
}

// audit writes an audit line: who (the key, or "-" when authentication is
// off), the request id, what was done and the state before and after.
func (s *server) audit(c echo.Context, action string, attrs ...slog.Attr) {
	who := "-"
	if k := requestKey(c); k != nil {
		who = k.Name
	}
	all := append([]slog.Attr{slog.String("action", action), slog.String("key", who), slog.Any("request_id", requestIDOf(c))}, attrs...)
	s.log.LogAttrs(c.Request().Context(), slog.LevelInfo, "audit", all...)
}

// jsonValue is v as JSON for a log line: an object in the JSON format, a
// quoted JSON text in the text format.
func jsonValue(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}
