package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/shopspring/decimal"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/budgetd/budgetd/internal/auth"
	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/quota"
)

// ServiceName is the full name of the rate-limit service, as health
// checks and reflection name it.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Observer counts and logs what the service does. cmd/budgetd passes the
// HTTP API's (internal/http.RPC), so that gRPC calls are in the same
// series and access log as HTTP requests. Its methods must be safe for
// concurrent use.
type Observer interface {
	// RequestID is the id of a call that brings given as its
	// x-request-id metadata ("" without one): given when it is an id the
	// HTTP API would keep from an X-Request-Id header, else a new one made
	// as the HTTP API makes them. The call sends it back in its header
	// metadata and it is passed to Call.
	RequestID(given string) string
	// Call is one finished call: its context (with the call's span, when
	// traced), its full method, its gRPC status code as codes.Code.String
	// writes it (OK, InvalidArgument, …), how long it took, the name of the
	// key that made it ("-" without one) and its request id.
	Call(ctx context.Context, method, code string, elapsed time.Duration, key, requestID string)
	// Decided is one decision on a limit: op is "envoy" for a charged
	// descriptor (charged: the call's descriptors were charged) and
	// "check" for a descriptor that only asked.
	Decided(limit, op string, d bucket.Decision, cost decimal.Decimal, charged bool)
	// AuthFailed is a call refused by authentication, by reason:
	// missing, malformed, unknown (UNAUTHENTICATED), scope, limit
	// (PERMISSION_DENIED).
	AuthFailed(reason string)
}

// Option configures a Server.
type Option func(*Server)

// WithAuth turns API keys on: keys returns the keys in force for each call
// (so that a reload takes effect at once). A call then needs
// `authorization: Bearer TOKEN` metadata of a key with the charge scope
// and the right on every limit its descriptors map to.
func WithAuth(keys func() *auth.Keys) Option { return func(s *Server) { s.keys = keys } }

// WithObserver sets where calls and decisions are counted and logged.
func WithObserver(o Observer) Option { return func(s *Server) { s.obs = o } }

// WithLogger sets where failures are logged (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// Server answers Envoy's ShouldRateLimit over a ledger.Service, each
// request's descriptors mapped to limits and bucket keys by a Mapping
// (../shared/SPEC.md "Behind Envoy", docs/envoy.md).
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	svc     *ledger.Service
	mapping *Mapping
	keys    func() *auth.Keys
	obs     Observer
	log     *slog.Logger
	health  *health.Server
}

// NewServer returns the rate-limit service over svc with mapping m (nil:
// no descriptor is limited).
func NewServer(svc *ledger.Service, m *Mapping, opts ...Option) *Server {
	if m == nil {
		m = &Mapping{}
	}
	s := &Server{svc: svc, mapping: m, log: slog.Default(), health: health.NewServer()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// GRPC returns a gRPC server with the rate-limit service, grpc.health.v1
// health (SERVING for "" and ServiceName until Drain) and reflection
// registered; opts add to it (credentials for TLS).
func (s *Server) GRPC(opts ...grpc.ServerOption) *grpc.Server {
	// opts' interceptors (cmd/budgetd's tracing) run outside observe, so
	// that a call's span is in the context the observer sees.
	g := grpc.NewServer(append(slices.Clip(opts), grpc.ChainUnaryInterceptor(s.observe))...)
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	return g
}

// Drain makes health checks answer NOT_SERVING, so that a gateway stops
// sending new calls while those in flight finish.
func (s *Server) Drain() { s.health.Shutdown() }

// RequestIDKey is the metadata key of a call's request id: read from the
// call (the caller's, when well formed) and always sent back in the
// response's header metadata, as the HTTP API does with X-Request-Id.
const RequestIDKey = "x-request-id"

// callKey is the context key of a call's *callInfo.
type callKey struct{}

// callInfo is what a call tells the interceptor that observes it, and what
// the call knows of itself.
type callInfo struct{ key, requestID string }

// observe gives each unary call its request id (sent back in the header
// metadata) and reports it to the observer, health checks too (as HTTP
// counts its probes).
func (s *Server) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if s.obs == nil {
		return next(ctx, req)
	}
	start := time.Now()
	var given string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(RequestIDKey); len(v) > 0 {
			given = v[0] // the first, as HTTP's Header.Get
		}
	}
	ci := &callInfo{key: "-", requestID: s.obs.RequestID(given)}
	_ = grpc.SetHeader(ctx, metadata.Pairs(RequestIDKey, ci.requestID))
	resp, err := next(context.WithValue(ctx, callKey{}, ci), req)
	s.obs.Call(ctx, info.FullMethod, status.Code(err).String(), time.Since(start), ci.key, ci.requestID)
	return resp, err
}

// requestIDOf is the call's request id, nil without one (as slog writes a
// missing id in the HTTP API's log lines).
func requestIDOf(ctx context.Context) any {
	if ci, ok := ctx.Value(callKey{}).(*callInfo); ok && ci.requestID != "" {
		return ci.requestID
	}
	return nil
}

// descriptor is one descriptor of a request as the call decides it.
type descriptor struct {
	matched bool
	ref     ledger.BucketRef
	cost    decimal.Decimal
	ask     bool // an explicit hits_addend of 0: only asks
	d       bucket.Decision
	limit   ledger.Limit
}

// ShouldRateLimit decides a request's descriptors together: those that
// charge are one multi-bucket Fillup (all charged or none), those with an
// explicit hits_addend of 0 only ask (CanAccept of the request's cost), and
// when one that asks is denied nothing is charged. A descriptor that no
// rule matches is OK and unlimited. See docs/envoy.md.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	key, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	ds, err := s.resolve(req, key)
	if err != nil {
		return nil, err
	}
	if err := s.decide(ctx, ds); err != nil {
		return nil, s.fail(ctx, err)
	}
	return answer(ds), nil
}

// resolve checks a request and maps its descriptors, before anything is
// read or charged.
func (s *Server) resolve(req *rlsv3.RateLimitRequest, key *auth.Key) ([]descriptor, error) {
	if req.GetDomain() == "" {
		return nil, invalidArg("domain", "is required")
	}
	n := len(req.GetDescriptors())
	if n == 0 || n > ledger.MaxItems {
		return nil, invalidArg("descriptors", fmt.Sprintf("between 1 and %d descriptors are allowed, got %d", ledger.MaxItems, n))
	}
	requestCost, costField := uint64(req.GetHitsAddend()), "hits_addend"
	if requestCost == 0 {
		requestCost = 1 // unset, as in Envoy
	}
	ds := make([]descriptor, n)
	for i, pd := range req.GetDescriptors() {
		at := fmt.Sprintf("descriptors[%d]", i)
		if pd.GetIsNegativeHits() {
			return nil, invalidArg(at+".is_negative_hits", "refunds are not taken here: a refund is a Drain, which needs the admin scope of the HTTP API")
		}
		if pd.GetLimit() != nil {
			return nil, invalidArg(at+".limit", "budgetd's limits are its own (the limits file or the API): remove the override from the rate_limits action")
		}
		entries := make([]DescriptorEntry, len(pd.GetEntries()))
		for j, e := range pd.GetEntries() {
			entries[j] = DescriptorEntry{Key: e.GetKey(), Value: e.GetValue()}
		}
		limit, bkey, ok := s.mapping.Match(req.GetDomain(), entries)
		if !ok {
			continue
		}
		if err := ledger.ValidateKey(bkey); err != nil {
			return nil, invalidArg(at+".entries", "the bucket key they make is not a key: "+err.(*ledger.InvalidError).Reason)
		}
		cost, field := requestCost, costField
		if h := pd.GetHitsAddend(); h != nil {
			cost, field = h.GetValue(), at+".hits_addend"
		}
		d := descriptor{matched: true, ref: ledger.BucketRef{Limit: limit, Key: bkey}, cost: decimal.NewFromUint64(cost)}
		if cost == 0 {
			// Only asks: would the request's own cost fit?
			d.ask, d.cost, field = true, decimal.NewFromUint64(requestCost), costField
		}
		if d.cost.GreaterThan(ledger.MaxAmount) {
			return nil, invalidArg(field, "must be at most "+ledger.MaxAmount.String())
		}
		if key != nil && !key.MayUse(limit) {
			s.authFailed("limit")
			return nil, status.Errorf(codes.PermissionDenied, "%s: the key %s may not act on the limit %s", at, key.Name, limit)
		}
		ds[i] = d
	}
	return ds, nil
}

// decide asks first, then charges every charging descriptor in one
// Fillup unless an ask was denied; then each charging descriptor is
// answered by a CanAccept of its cost, nothing having been charged.
func (s *Server) decide(ctx context.Context, ds []descriptor) error {
	asksFit := true
	var items []ledger.Item
	var slots []int
	for i := range ds {
		d := &ds[i]
		switch {
		case !d.matched:
		case d.ask:
			res, err := s.svc.Check(ctx, d.ref, d.cost)
			if err != nil {
				return err
			}
			d.d, d.limit = res.Decision, res.Limit
			asksFit = asksFit && d.d.Accepted
			s.decided(d, "check", false)
		default:
			items = append(items, ledger.Item{Bucket: d.ref, Cost: d.cost})
			slots = append(slots, i)
		}
	}
	if len(items) == 0 {
		return nil
	}
	if !asksFit {
		for _, i := range slots {
			res, err := s.svc.Check(ctx, ds[i].ref, ds[i].cost)
			if err != nil {
				return err
			}
			ds[i].d, ds[i].limit = res.Decision, res.Limit
			s.decided(&ds[i], "envoy", false)
		}
		return nil
	}
	res, err := s.svc.Fillup(ctx, items, ledger.Idempotency{})
	if err != nil {
		return err
	}
	for j, i := range slots {
		ds[i].d, ds[i].limit = res.Items[j], res.Limits[j]
		s.decided(&ds[i], "envoy", res.Accepted)
	}
	return nil
}

func (s *Server) decided(d *descriptor, op string, charged bool) {
	if s.obs != nil {
		s.obs.Decided(d.ref.Limit, op, d.d, d.cost, charged)
	}
}

// answer builds the response of decided descriptors.
func answer(ds []descriptor) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}
	var qs []quota.Quota
	for i, d := range ds {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		if !d.matched {
			continue
		}
		q := quota.Of(d.ref.Limit, d.limit, d.d)
		qs = append(qs, q)
		if !d.d.Accepted {
			st.Code, resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT
		}
		st.CurrentLimit = currentLimit(d.ref.Limit, d.limit, d.d)
		st.LimitRemaining = clampUint32(d.d.Remaining.Floor())
		if q.HasT {
			st.DurationUntilReset = durationpb.New(q.Reset)
		}
	}
	if len(qs) > 0 {
		b, split := quota.AppendFields(nil, qs...)
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: "RateLimit-Policy", Value: string(b[:split])},
			{Key: "RateLimit", Value: string(b[split:])},
		}
	}
	return resp
}

// clampUint32 clamps a whole number of units to a uint32; ok false (past
// an int64) clamps to the largest.
func clampUint32(n int64, ok bool) uint32 {
	switch {
	case !ok || n > math.MaxUint32:
		return math.MaxUint32
	case n < 0:
		return 0
	}
	return uint32(n)
}

// units are the protocol's units of time, shortest first, with their
// length (a month as 30 days, a year as 365).
var units = []struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// calendarUnits are the units of calendar periods, a quarter being three
// months.
var calendarUnits = map[string]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	mult uint32
}{
	"day":     {rlsv3.RateLimitResponse_RateLimit_DAY, 1},
	"week":    {rlsv3.RateLimitResponse_RateLimit_WEEK, 1},
	"month":   {rlsv3.RateLimitResponse_RateLimit_MONTH, 1},
	"quarter": {rlsv3.RateLimitResponse_RateLimit_MONTH, 3},
	"year":    {rlsv3.RateLimitResponse_RateLimit_YEAR, 1},
}

// currentLimit describes limit l (named name) as the protocol does: the
// capacity (whole units, clamped to uint32) per the unit nearest its leak
// period, calendar period or window. For a leak period or a window the
// unit is the longest not longer than it (SECOND below a second) and the
// multiplier the number of those units it spans, rounded to the nearest.
func currentLimit(name string, l ledger.Limit, d bucket.Decision) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clampUint32(d.Capacity.Floor())}
	var span time.Duration
	switch {
	case l.Period != nil:
		cu := calendarUnits[l.Period.Every]
		rl.Unit = cu.unit
		if cu.mult > 1 {
			rl.UnitMultiplier = wrapperspb.UInt32(cu.mult)
		}
		return rl
	case l.Window != nil:
		span = l.Window.Length
	default:
		span = l.LeakPer
	}
	u := units[0]
	for _, c := range units[1:] {
		if c.d <= span {
			u = c
		}
	}
	rl.Unit = u.unit
	if mult := (span + u.d/2) / u.d; mult > 1 {
		rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(mult, math.MaxUint32)))
	}
	return rl
}

// authenticate returns the call's key (nil when authentication is off), or
// the status that refuses the call: UNAUTHENTICATED without a known
// token, PERMISSION_DENIED without the charge scope.
func (s *Server) authenticate(ctx context.Context) (*auth.Key, error) {
	if s.keys == nil {
		return nil, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	switch {
	case len(vals) > 1:
		// A proxy that checks one of them would see another caller than
		// budgetd acts as, as over HTTP.
		return nil, invalidArg("authorization", "send one authorization, not several")
	case len(vals) == 0 || vals[0] == "":
		s.authFailed("missing")
		return nil, status.Error(codes.Unauthenticated, "send authorization: Bearer TOKEN")
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		s.authFailed("malformed")
		return nil, status.Error(codes.Unauthenticated, "the authorization must be Bearer TOKEN")
	}
	k, ok := s.keys().Authenticate(token)
	if !ok {
		s.authFailed("unknown")
		return nil, status.Error(codes.Unauthenticated, "the bearer token is not known")
	}
	if ci, ok := ctx.Value(callKey{}).(*callInfo); ok {
		ci.key = k.Name
	}
	if !k.Allows(auth.Charge) {
		s.authFailed("scope")
		return nil, status.Errorf(codes.PermissionDenied, "the key %s does not have the charge scope", k.Name)
	}
	return k, nil
}

func (s *Server) authFailed(reason string) {
	if s.obs != nil {
		s.obs.AuthFailed(reason)
	}
}

// fail maps an error of the service to the call's status: bad input is
// INVALID_ARGUMENT, a store that did not answer UNAVAILABLE (the gateway's
// failure_mode_deny decides), a mapping to a limit that does not exist or
// buckets a Redis Cluster cannot charge together FAILED_PRECONDITION (the
// configuration is wrong, not the request), anything else INTERNAL with
// the cause logged only.
func (s *Server) fail(ctx context.Context, err error) error {
	var ie *ledger.InvalidError
	switch {
	case errors.As(err, &ie):
		return invalidArg(ie.Field, ie.Reason)
	case errors.Is(err, ledger.ErrUnavailable):
		s.log.Warn("envoy: store unavailable", "err", err, "request_id", requestIDOf(ctx))
		return status.Error(codes.Unavailable, "the store did not answer; nothing is known to be charged")
	case errors.Is(err, ledger.ErrLimitNotFound):
		s.log.Error("envoy: a descriptor maps to a limit that does not exist", "err", err, "request_id", requestIDOf(ctx))
		return status.Error(codes.FailedPrecondition, "a descriptor maps to a limit that does not exist: "+err.Error())
	case errors.Is(err, ledger.ErrCrossSlot):
		return status.Error(codes.FailedPrecondition, "the descriptors' buckets are in different Redis Cluster hash slots and cannot be charged together")
	case errors.Is(err, ledger.ErrNotServed):
		return status.Error(codes.Unimplemented, err.Error())
	}
	s.log.Error("envoy: internal error", "err", err, "request_id", requestIDOf(ctx))
	return status.Error(codes.Internal, "internal error")
}

// invalidArg is INVALID_ARGUMENT naming field, in the message and as a
// google.rpc.BadRequest field violation.
func invalidArg(field, reason string) error {
	st := status.New(codes.InvalidArgument, field+": "+reason)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: reason}}}); err == nil {
		st = d
	}
	return st.Err()
}
