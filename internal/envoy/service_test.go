package envoy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/shopspring/decimal"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/budgetd/budgetd/internal/auth"
	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/envoy"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/storetest"
	"github.com/budgetd/budgetd/internal/testenv"
)

func str(s string) *string { return &s }

// testMapping maps the domain "api": a tenant's calls (one entry), its
// imported rows (tenant and path /import), and a "spend" and a "huge"
// limit, each bucket keyed by the tenant; the tenant is the bucket key of
// every rule, so that a Redis Cluster charges them together.
func testMapping(t *testing.T) *envoy.Mapping {
	m, err := envoy.NewMapping([]envoy.Domain{{Domain: "api", Descriptors: []envoy.Rule{
		{Entries: []envoy.Entry{{Key: "tenant"}, {Key: "path", Value: str("/import")}}, Limit: "rows", Bucket: "{tenant}"},
		{Entries: []envoy.Entry{{Key: "tenant"}}, Limit: "calls", Bucket: "{tenant}"},
		{Entries: []envoy.Entry{{Key: "shadow"}}, Limit: "shadowed", Bucket: "{shadow}"},
		{Entries: []envoy.Entry{{Key: "huge"}}, Limit: "huge", Bucket: "{huge}"},
		{Entries: []envoy.Entry{{Key: "gone"}}, Limit: "missing", Bucket: "{gone}"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// putLimits creates the limits of testMapping: calls 3 per hour, rows
// 100 per hour, shadowed (capacity 1, shadow mode) and huge (10^10 a
// month, beyond a uint32).
func putLimits(t *testing.T, svc *ledger.Service) {
	ctx := context.Background()
	for name, spec := range map[string]ledger.LimitSpec{
		"calls":    {Capacity: dec("3"), LeakAmount: dec("3"), LeakPer: time.Hour},
		"rows":     {Capacity: dec("100"), LeakAmount: dec("100"), LeakPer: time.Hour},
		"shadowed": {Capacity: dec("1"), LeakAmount: dec("1"), LeakPer: time.Second, Mode: ledger.ModeShadow},
		"huge":     {Capacity: dec("10000000000"), Period: &ledger.Period{Every: "month", TZ: "UTC"}},
	} {
		if _, err := svc.PutLimit(ctx, name, spec); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// recorder is an envoy.Observer that keeps what it is told.
type recorder struct {
	mu        sync.Mutex
	calls     []string // method code key
	decisions []string // limit op accepted shadow_denied charged
	auth      []string
	ids       []string // each call's request id
	made      int      // request ids made
}

func (r *recorder) Call(_ context.Context, method, code string, _ time.Duration, key, requestID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, method+" "+code+" "+key)
	r.ids = append(r.ids, requestID)
}

// RequestID keeps a caller's id, whatever it is, and numbers the others.
func (r *recorder) RequestID(given string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if given != "" {
		return given
	}
	r.made++
	return fmt.Sprintf("made-%d", r.made)
}

func (r *recorder) Decided(limit, op string, d bucket.Decision, _ decimal.Decimal, charged bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decisions = append(r.decisions, strings.Join([]string{limit, op, yes(d.Accepted, "accepted"), yes(d.ShadowDenied, "shadow_denied"), yes(charged, "charged")}, " "))
}

func (r *recorder) AuthFailed(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auth = append(r.auth, reason)
}

func yes(b bool, s string) string {
	if b {
		return s
	}
	return "-"
}

// rls is a client of a rate-limit service served on an in-memory
// listener, with the service's ledger.
type rls struct {
	rlsv3.RateLimitServiceClient
	health healthpb.HealthClient
	svc    *ledger.Service
	srv    *envoy.Server
	obs    *recorder
}

func serve(t *testing.T, store ledger.Store, opts ...envoy.Option) *rls {
	t.Helper()
	svc := ledger.NewService(store)
	obs := &recorder{}
	srv := envoy.NewServer(svc, testMapping(t), append([]envoy.Option{envoy.WithObserver(obs)}, opts...)...)
	g := srv.GRPC()
	ln := bufconn.Listen(1 << 20)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///budgetd", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rls{RateLimitServiceClient: rlsv3.NewRateLimitServiceClient(conn), health: healthpb.NewHealthClient(conn), svc: svc, srv: srv, obs: obs}
}

// desc builds a descriptor of key/value entries; hits, when not nil, is
// its own hits_addend.
func desc(hits *uint64, kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	if hits != nil {
		d.HitsAddend = wrapperspb.UInt64(*hits)
	}
	return d
}

func hits(n uint64) *uint64 { return &n }

func (c *rls) ask(t *testing.T, hitsAddend uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: ds, HitsAddend: hitsAddend})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// level reads a bucket's level.
func (c *rls) level(t *testing.T, limit, key string) string {
	t.Helper()
	b, err := c.svc.Bucket(context.Background(), ledger.BucketRef{Limit: limit, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return b.Level.String()
}

func codesOf(resp *rlsv3.RateLimitResponse) string {
	out := []string{resp.GetOverallCode().String()}
	for _, s := range resp.GetStatuses() {
		out = append(out, s.GetCode().String())
	}
	return strings.Join(out, " ")
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == name {
			return h.GetValue()
		}
	}
	return ""
}

// TestShouldRateLimit drives the service through a gRPC client of the
// protocol's own module, on every store.
func TestShouldRateLimit(t *testing.T) {
	storetest.Each(t, "envoy", func(t *testing.T, _ *ledgertest.Clock, store ledger.Store) {
		c := serve(t, store)
		putLimits(t, c.svc)

		t.Run("charged together", func(t *testing.T) {
			resp := c.ask(t, 0, desc(nil, "tenant", "t1"), desc(hits(40), "tenant", "t1", "path", "/import"), desc(nil, "other", "x"))
			if got := codesOf(resp); got != "OK OK OK OK" {
				t.Fatalf("codes %s, want all OK", got)
			}
			st := resp.Statuses
			if st[0].GetLimitRemaining() != 2 || st[1].GetLimitRemaining() != 60 {
				t.Errorf("remaining %d and %d, want 2 and 60", st[0].GetLimitRemaining(), st[1].GetLimitRemaining())
			}
			if cl := st[0].GetCurrentLimit(); cl.GetName() != "calls" || cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
				t.Errorf("current_limit %v, want calls 3 per HOUR", cl)
			}
			// 1 of 3 leaks in 20 minutes: the level is empty in 20 min.
			if d := st[0].GetDurationUntilReset().AsDuration(); d != 20*time.Minute {
				t.Errorf("duration_until_reset %s, want 20m", d)
			}
			if st[2].GetCurrentLimit() != nil || st[2].GetDurationUntilReset() != nil {
				t.Errorf("an unmatched descriptor has a limit: %v", st[2])
			}
			if got := c.level(t, "calls", "t1") + " " + c.level(t, "rows", "t1"); got != "1 40" {
				t.Errorf("levels %s, want 1 40", got)
			}
			if got := header(resp, "RateLimit-Policy"); got != `"calls";q=3;w=3600, "rows";q=100;w=3600` {
				t.Errorf("RateLimit-Policy %q", got)
			}
			if got := header(resp, "RateLimit"); got != `"calls";r=2;t=1200, "rows";r=60;t=1440` {
				t.Errorf("RateLimit %q", got)
			}
		})

		t.Run("one denied charges none", func(t *testing.T) {
			resp := c.ask(t, 0, desc(nil, "tenant", "t1"), desc(hits(70), "tenant", "t1", "path", "/import"))
			if got := codesOf(resp); got != "OVER_LIMIT OK OVER_LIMIT" {
				t.Fatalf("codes %s, want OVER_LIMIT OK OVER_LIMIT", got)
			}
			if got := c.level(t, "calls", "t1") + " " + c.level(t, "rows", "t1"); got != "1 40" {
				t.Errorf("levels %s after a denial, want 1 40 (nothing charged)", got)
			}
			if got := header(resp, "RateLimit"); !strings.Contains(got, `"rows";r=60;t=`) {
				t.Errorf("RateLimit %q: the denied bucket's remaining is missing", got)
			}
		})

		t.Run("unmatched only", func(t *testing.T) {
			resp := c.ask(t, 0, desc(nil, "nobody", "x"), desc(nil, "tenant", "t1", "path", "/export"))
			if got := codesOf(resp); got != "OK OK OK" || len(resp.ResponseHeadersToAdd) != 0 {
				t.Errorf("codes %s, headers %v: want OK and none", got, resp.ResponseHeadersToAdd)
			}
		})

		t.Run("hits_addend", func(t *testing.T) {
			// The request's hits_addend is the cost of a descriptor without
			// its own.
			c.ask(t, 5, desc(nil, "tenant", "t2", "path", "/import"))
			if got := c.level(t, "rows", "t2"); got != "5" {
				t.Errorf("request hits_addend 5: level %s", got)
			}
			// An explicit 0 only asks, with the request's cost: it charges
			// nothing, and 96 more rows do not fit.
			resp := c.ask(t, 96, desc(hits(0), "tenant", "t2", "path", "/import"))
			if got := codesOf(resp); got != "OVER_LIMIT OVER_LIMIT" || c.level(t, "rows", "t2") != "5" {
				t.Errorf("ask 96: %s, level %s; want OVER_LIMIT and 5", got, c.level(t, "rows", "t2"))
			}
			// A denied ask charges none of the other descriptors.
			resp = c.ask(t, 96, desc(hits(0), "tenant", "t2", "path", "/import"), desc(hits(1), "tenant", "t2"))
			if got := codesOf(resp); got != "OVER_LIMIT OVER_LIMIT OK" || c.level(t, "calls", "t2") != "0" {
				t.Errorf("denied ask beside a charge: %s, calls level %s; want OVER_LIMIT OVER_LIMIT OK and 0", got, c.level(t, "calls", "t2"))
			}
			// An ask that fits lets the others be charged; the asked bucket
			// stays as it was.
			resp = c.ask(t, 0, desc(hits(0), "tenant", "t2", "path", "/import"), desc(hits(2), "tenant", "t2"))
			if got := codesOf(resp); got != "OK OK OK" || c.level(t, "calls", "t2") != "2" || c.level(t, "rows", "t2") != "5" {
				t.Errorf("ask beside a charge: %s, levels %s %s; want OK, 2 and 5", got, c.level(t, "calls", "t2"), c.level(t, "rows", "t2"))
			}
			// A request hits_addend of 0 is unset: 1.
			c.ask(t, 0, desc(nil, "tenant", "t2"))
			if got := c.level(t, "calls", "t2"); got != "3" {
				t.Errorf("hits_addend 0: level %s, want 3", got)
			}
		})

		t.Run("shadow", func(t *testing.T) {
			resp := c.ask(t, 3, desc(nil, "shadow", "s1"))
			if got := codesOf(resp); got != "OK OK" {
				t.Errorf("shadow mode: %s, want OK", got)
			}
			if got := c.level(t, "shadowed", "s1"); got != "3" {
				t.Errorf("shadow mode: level %s, want 3 (charged)", got)
			}
			c.obs.mu.Lock()
			last := c.obs.decisions[len(c.obs.decisions)-1]
			c.obs.mu.Unlock()
			if last != "shadowed envoy accepted shadow_denied charged" {
				t.Errorf("counted %q, want a shadow-denied charge", last)
			}
		})

		t.Run("clamped", func(t *testing.T) {
			st := c.ask(t, 0, desc(nil, "huge", "h")).Statuses[0]
			if st.GetLimitRemaining() != 1<<32-1 || st.GetCurrentLimit().GetRequestsPerUnit() != 1<<32-1 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MONTH {
				t.Errorf("a capacity of 10^10 a month: %v, want remaining and requests_per_unit 4294967295 per MONTH", st)
			}
		})

		t.Run("missing limit", func(t *testing.T) {
			_, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc(nil, "gone", "g")}})
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("a mapping to a missing limit: %v, want FAILED_PRECONDITION", err)
			}
		})

		t.Run("invalid", func(t *testing.T) { testInvalid(t, c) })
		t.Run("auth", func(t *testing.T) { testAuth(t, store) })
	})
}

// testInvalid: bad input is INVALID_ARGUMENT naming the field, and
// changes nothing.
func testInvalid(t *testing.T, c *rls) {
	long := strings.Repeat("k", ledger.MaxKeyBytes+1)
	for _, tc := range []struct {
		req   *rlsv3.RateLimitRequest
		field string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{desc(nil, "tenant", "t9")}}, "domain"},
		{&rlsv3.RateLimitRequest{Domain: "api"}, "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc(nil, "tenant", "t9"), desc(hits(1_000_000_000_001), "tenant", "t9", "path", "/import")}}, "descriptors[1].hits_addend"},
		{&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc(nil, "tenant", "t9"), desc(nil, "tenant", long)}}, "descriptors[1].entries"},
		{&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc(nil, "tenant", "t9"), {Entries: desc(nil, "tenant", "t9").Entries, IsNegativeHits: true}}}, "descriptors[1].is_negative_hits"},
	} {
		_, err := c.ShouldRateLimit(context.Background(), tc.req)
		st := status.Convert(err)
		var field string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.FieldViolations) > 0 {
				field = br.FieldViolations[0].Field
			}
		}
		if st.Code() != codes.InvalidArgument || field != tc.field || !strings.HasPrefix(st.Message(), tc.field+": ") {
			t.Errorf("%v: %s %q naming %q, want INVALID_ARGUMENT naming %s", tc.req, st.Code(), st.Message(), field, tc.field)
		}
	}
	if got := c.level(t, "calls", "t9"); got != "0" {
		t.Errorf("bad requests charged: level %s", got)
	}
}

// testAuth: a call needs a known token with the charge scope and the
// right on every limit it maps to; a refused call charges nothing.
func testAuth(t *testing.T, store ledger.Store) {
	keys, err := auth.Parse(strings.NewReader(strings.Join([]string{
		auth.Line("charger", "tok-charge", auth.Charge, nil),
		auth.Line("reader", "tok-read", auth.Read, nil),
		auth.Line("rows-only", "tok-rows", auth.Charge, []string{"rows"}),
	}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, store, envoy.WithAuth(func() *auth.Keys { return keys }))
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc(nil, "tenant", "a1"), desc(nil, "tenant", "a1", "path", "/import")}}
	for _, tc := range []struct {
		md   []string
		code codes.Code
	}{
		{nil, codes.Unauthenticated},
		{[]string{"authorization", "Bearer wrong"}, codes.Unauthenticated},
		{[]string{"authorization", "tok-charge"}, codes.Unauthenticated},
		{[]string{"authorization", "Bearer tok-read"}, codes.PermissionDenied},
		{[]string{"authorization", "Bearer tok-rows"}, codes.PermissionDenied}, // calls is not its limit
		{[]string{"authorization", "Bearer tok-charge"}, codes.OK},
	} {
		ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(tc.md...))
		if _, err := c.ShouldRateLimit(ctx, req); status.Code(err) != tc.code {
			t.Errorf("%v: %v, want %s", tc.md, err, tc.code)
		}
	}
	if got := c.level(t, "calls", "a1") + " " + c.level(t, "rows", "a1"); got != "1 1" {
		t.Errorf("levels %s, want 1 1: only the allowed call charges", got)
	}
	c.obs.mu.Lock()
	authFailures, lastCall := strings.Join(c.obs.auth, " "), c.obs.calls[len(c.obs.calls)-1]
	c.obs.mu.Unlock()
	if got := authFailures; got != "missing unknown malformed scope limit" {
		t.Errorf("auth failures counted %q", got)
	}
	if got := lastCall; got != "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit OK charger" {
		t.Errorf("last call observed as %q", got)
	}
	// Health needs no token.
	if r, err := c.health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a token: %v %v", r, err)
	}
}

// TestHealth: SERVING for the server and the service until Drain, then
// NOT_SERVING.
func TestHealth(t *testing.T) {
	c := serve(t, nil)
	for _, svc := range []string{"", envoy.ServiceName} {
		if r, err := c.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v %v", svc, r, err)
		}
	}
	c.srv.Drain()
	if r, err := c.health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health after Drain: %v %v", r, err)
	}
}

// TestStoreDown: a store that does not answer is UNAVAILABLE (the
// gateway's failure_mode_deny decides), on the stores that can be cut off.
func TestStoreDown(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		open      func(t *testing.T, url string) ledger.Store
	}{
		{"postgres", testenv.Postgres, func(t *testing.T, url string) ledger.Store {
			return storetest.Postgres(t, "envoy", url, ledgertest.NewClock())
		}},
		{"redis", testenv.Redis, func(t *testing.T, url string) ledger.Store {
			return storetest.Redis(t, "envoy", url, ledgertest.NewClock())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := testenv.Server(t, tc.env)
			p := storetest.NewProxy(t, hostPort(t, url))
			c := serve(t, tc.open(t, p.Through(t, url)))
			putLimits(t, c.svc)
			c.ask(t, 0, desc(nil, "tenant", "d1"))
			p.Down()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc(nil, "tenant", "d1")}})
			if status.Code(err) != codes.Unavailable {
				t.Errorf("store down: %v, want UNAVAILABLE", err)
			}
		})
	}
}

func hostPort(t *testing.T, rawURL string) string {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		t.Fatalf("not a URL: %s", rawURL)
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	host, _, _ := strings.Cut(rest, "/")
	host, _, _ = strings.Cut(host, "?")
	if _, _, err := net.SplitHostPort(host); err != nil {
		t.Fatal(errors.New("no host:port in the test server's URL"))
	}
	return host
}

// TestRequestID: every call has a request id, the caller's x-request-id
// (as the observer keeps it) or a new one; it comes back in the header
// metadata, on errors too, and is passed to the observer and logged with a
// failure.
func TestRequestID(t *testing.T) {
	var log syncBuffer
	c := serve(t, memory.New(), envoy.WithLogger(slog.New(slog.NewJSONHandler(&log, nil))))
	call := func(id string, req *rlsv3.RateLimitRequest) (string, error) {
		t.Helper()
		ctx := context.Background()
		if id != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, envoy.RequestIDKey, id)
		}
		var md metadata.MD
		_, err := c.ShouldRateLimit(ctx, req, grpc.Header(&md))
		if v := md.Get(envoy.RequestIDKey); len(v) == 1 {
			return v[0], err
		}
		t.Fatalf("header metadata %v: want one %s", md, envoy.RequestIDKey)
		return "", err
	}
	unlimited := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc(nil, "other", "x")}}
	if got, err := call("gw-1", unlimited); err != nil || got != "gw-1" {
		t.Errorf("with x-request-id gw-1: %q %v", got, err)
	}
	if got, err := call("", unlimited); err != nil || got != "made-1" {
		t.Errorf("without an id: %q %v", got, err)
	}
	if got, err := call("gw-2", &rlsv3.RateLimitRequest{}); status.Code(err) != codes.InvalidArgument || got != "gw-2" {
		t.Errorf("a bad request: %q %v", got, err)
	}
	missing := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{desc(nil, "gone", "x")}}
	if got, err := call("gw-3", missing); status.Code(err) != codes.FailedPrecondition || got != "gw-3" {
		t.Errorf("a mapping to a missing limit: %q %v", got, err)
	}
	c.obs.mu.Lock()
	ids := strings.Join(c.obs.ids, " ")
	c.obs.mu.Unlock()
	if ids != "gw-1 made-1 gw-2 gw-3" {
		t.Errorf("the observer saw the ids %s", ids)
	}
	if !strings.Contains(log.String(), `"request_id":"gw-3"`) {
		t.Errorf("the failure's log line has no request id:\n%s", log.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
