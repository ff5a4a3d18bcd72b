// Package client is the Go client of budgetd: one typed call per endpoint of
// its HTTP API (docs/api.md), amounts as exact decimals. It sends and reads
// the documents of package api (the wire contract the server is tested
// against) and returns them as they are: an api.Limit, api.BucketState,
// api.Drained, api.Resolved, api.Granted, api.Override, pages of api
// documents; a Decision or MultiDecision embeds budgetd's api document and
// adds the answer's RateLimit header fields. So a program that passes
// answers on, like budgetd's CLI with --json, prints every member budgetd
// sent, with no converter. Inputs with Go durations and times are the
// client's own: LimitSpec (with Leak, Period or Window), Override, Item.
//
// A denial is an answer, not an error: CanAccept, Fillup and Reserve return
// a Decision (FillupMany a MultiDecision) whose Accepted is false and whose
// RetryAfter (RetryAfterDuration for a Decision) says when the cost would
// fit. Errors are for bad input, missing
// things, closed holds and broken infrastructure; budgetd's problems arrive
// as *Error with its Code (an api.Code) and Field, and input budgetd would
// refuse is refused before sending (an *Error with Status 0).
//
// Every state-changing call carries an Idempotency-Key, generated when the
// caller gives none, and is retried with the same key on network errors and
// 503 answers (a bounded number of times, with backoff and jitter), so a retry
// never charges twice. Every call takes a context.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/budgetd/budgetd/api"
)

// Client calls one budgetd server. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	hc        *http.Client
	token     string
	attempts  int
	backoff   time.Duration
	maxWait   time.Duration
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends token as a bearer token (Authorization: Bearer TOKEN).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc for every request, e.g. one with its own transport
// or timeout. It replaces a TLS configuration given with WithTLSConfig
// unless that option comes later.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTLSConfig uses cfg for HTTPS: a private CA (RootCAs) or a client
// certificate (Certificates) for a budgetd started with --tls-client-ca.
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *Client) {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg
		hc := *c.hc
		hc.Transport = tr
		c.hc = &hc
	}
}

// WithRetries sets how many times a call is tried in all (at least 1; the
// default is 3) and the first backoff (default 100ms), which doubles on each
// retry, with jitter, up to 2s. Retries happen only on network errors and
// 503 answers, and reuse the call's Idempotency-Key.
func WithRetries(attempts int, backoff time.Duration) Option {
	return func(c *Client) {
		c.attempts = max(attempts, 1)
		c.backoff = backoff
	}
}

// New returns a client of the budgetd at server, e.g. "http://127.0.0.1:8080".
func New(server string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(server, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("budgetd client: server %q is not an http or https URL", server)
	}
	c := &Client{
		base:      u,
		hc:        &http.Client{Timeout: 30 * time.Second},
		attempts:  3,
		backoff:   100 * time.Millisecond,
		maxWait:   2 * time.Second,
		userAgent: "budgetd-go-client",
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// CallOption changes one call.
type CallOption func(*callOpts)

type callOpts struct {
	idemKey string
	meta    map[string]string
}

// IdempotencyKey sends key instead of a generated one, so that a call
// repeated later (after a crash, from a queue) is recognised by budgetd.
func IdempotencyKey(key string) CallOption { return func(o *callOpts) { o.idemKey = key } }

// Meta attaches string values to the call's history entry (Fillup, Reserve,
// Commit, Release, Drain): what a spend was for.
func Meta(meta map[string]string) CallOption { return func(o *callOpts) { o.meta = meta } }

func applyOpts(opts []CallOption) callOpts {
	var o callOpts
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Error is a problem answered by budgetd (RFC 9457 problem+json), or an
// input the client refused before sending (Status 0).
type Error struct {
	Status int      // the HTTP status; 0 when the client refused the input itself
	Code   api.Code // budgetd's stable code: api.CodeInvalidAmount, api.CodeLimitNotFound, …
	Field  string   // the offending input of a 400, e.g. "cost" or "items[2].key"
	Title  string
	Detail string
	// Reservation is the hold a refusal is about (exceeds_hold,
	// reservation_expired, reservation_closed); nil otherwise.
	Reservation *api.Reservation
	// NotBudgetd: the answer was not a budgetd problem document (no code):
	// something else answered — a proxy, a load balancer, another service
	// at that address. Code is then "http_" and the status, e.g. "http_404",
	// and Detail the start of the body.
	NotBudgetd bool
}

// ErrBadAnswer is wrapped by the error of an answer the client could not
// read (not JSON, or not the document budgetd sends): budgetd was reached,
// but what it said is not understood — a version mismatch or a proxy in the
// way, not an outage.
var ErrBadAnswer = errors.New("budgetd: answer not understood")

func (e *Error) Error() string {
	s := "budgetd: " + string(e.Code)
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Status != 0 {
		s += " [" + strconv.Itoa(e.Status) + "]"
	}
	return s
}

// IsCode reports whether err is a budgetd problem with the given code.
func IsCode(err error, code api.Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// IsUnavailable reports whether err means budgetd could not decide: a
// network error, a timeout, a 5xx answer, or an answer not understood
// (ErrBadAnswer). A caller that must not spend
// without a decision treats it as a denial (fail closed).
func IsUnavailable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500
	}
	return err != nil
}

// newKey is a random Idempotency-Key.
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// answer is one HTTP answer read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends one call, retrying network errors and 503s with the same
// Idempotency-Key; a state-changing call (POST) always carries one. It
// returns the answer of the last try, whatever its status.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body any, o callOpts) (answer, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return answer{}, err
		}
	}
	u := *c.base
	u.RawPath = c.base.Path + path
	u.Path, _ = url.PathUnescape(u.RawPath)
	if query != nil {
		u.RawQuery = query.Encode()
	}
	key := o.idemKey
	if method == http.MethodPost && key == "" {
		key = newKey()
	}
	var lastErr error
	for try := 0; try < c.attempts; try++ {
		if try > 0 {
			if err := c.sleep(ctx, try); err != nil {
				return answer{}, errors.Join(lastErr, err)
			}
		}
		req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(payload))
		if err != nil {
			return answer{}, err
		}
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", c.userAgent)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if key != "" && method == http.MethodPost {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := c.hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return answer{}, err
			}
			lastErr = err
			continue
		}
		b, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
		res.Body.Close()
		if err != nil {
			lastErr = err
			continue
		}
		a := answer{status: res.StatusCode, header: res.Header, body: b}
		if res.StatusCode == http.StatusServiceUnavailable && try+1 < c.attempts {
			lastErr = problem(a)
			continue
		}
		return a, nil
	}
	return answer{}, lastErr
}

// sleep waits before retry number try: the backoff doubled per try, capped,
// with full jitter in its upper half.
func (c *Client) sleep(ctx context.Context, try int) error {
	d := c.backoff << (try - 1)
	if d > c.maxWait || d <= 0 {
		d = c.maxWait
	}
	d = d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// problem decodes a problem+json answer into an *Error.
func problem(a answer) *Error {
	e := &Error{Status: a.status}
	var p api.Problem
	if json.Unmarshal(a.body, &p) == nil {
		e.Title, e.Detail, e.Code, e.Field = p.Title, p.Detail, p.Code, p.Field
		e.Reservation = p.Reservation
	}
	if e.Code == "" {
		e.NotBudgetd = true
		e.Code = api.Code("http_" + strconv.Itoa(a.status))
		if e.Detail == "" {
			e.Detail = strings.TrimSpace(string(a.body))
		}
	}
	return e
}

// decode reads a 2xx (or one of the extra statuses allowed) answer into v,
// and anything else into an *Error.
func decode(a answer, v any, ok ...int) error {
	good := a.status >= 200 && a.status < 300
	for _, s := range ok {
		good = good || a.status == s
	}
	if !good {
		return problem(a)
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("%w: reading a %d answer: %v", ErrBadAnswer, a.status, err)
	}
	if err := checkShape(a.body, v); err != nil {
		return fmt.Errorf("%w: a %d answer that is not budgetd's document: %v", ErrBadAnswer, a.status, err)
	}
	return nil
}

func esc(s string) string { return url.PathEscape(s) }
