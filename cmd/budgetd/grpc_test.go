package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/budgetd/budgetd/internal/auth"
)

var grpcURLRE = regexp.MustCompile(`rate-limit service on grpcs?://(\S+?)"?[ ,\n]`)

// waitGRPC waits for the start-up line of the gRPC listener and returns
// its address.
func (s *started) waitGRPC(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := grpcURLRE.FindStringSubmatch(s.stdout.String()); m != nil {
			return m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no gRPC start-up line in %q", s.stdout.String())
	return ""
}

// TestGRPCListener: --grpc-addr serves Envoy's rate-limit service beside
// the API, with its keys, its TLS files (client certificates too), health,
// and the API's metrics and access log; shutdown stops both.
func TestGRPCListener(t *testing.T) {
	dir := t.TempDir()
	pool, client := tlsFiles(t, dir, "grpc")
	keyFile := filepath.Join(dir, "keys")
	os.WriteFile(keyFile, []byte(auth.Line("gateway", "tok-gateway", auth.Charge, nil)+"\n"+auth.Line("ops", "tok-ops", auth.Admin, nil)+"\n"), 0o600)
	s := start(t, "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--auth-file", keyFile, "--log-format", "json",
		"--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem"), "--tls-client-ca", filepath.Join(dir, "ca.pem"))
	addr := s.waitGRPC(t)

	dial := func(certs ...tls.Certificate) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: certs})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(dial()).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("served a client without a certificate")
	}
	conn := dial(client)
	if r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", r, err)
	}
	rls := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t1"}}}}}
	if _, err := rls.ShouldRateLimit(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a token: %v", err)
	}
	var md metadata.MD
	resp, err := rls.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok-gateway", "x-request-id", "gw-7"), req, grpc.Header(&md))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with the gateway's key: %v %v", resp, err)
	}
	if got := md.Get("x-request-id"); len(got) != 1 || got[0] != "gw-7" {
		t.Errorf("x-request-id in the answer's header: %q, want the caller's gw-7", got)
	}

	// The calls are in the API's metrics and access log.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client}}}}
	mreq, _ := http.NewRequest("GET", s.url+"/metrics", nil)
	mreq.Header.Set("Authorization", "Bearer tok-ops")
	res, err := hc.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`budgetd_grpc_request_duration_seconds_count{code="OK",method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} 1`,
		`budgetd_grpc_request_duration_seconds_count{code="Unauthenticated",method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} 1`,
		`budgetd_auth_failures_total{reason="missing"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	s.waitLog(t, `"msg":"request","method":"GRPC","route":"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit","status":200,`)
	s.waitLog(t, `"request_id":"gw-7","key":"gateway"}`)
	s.waitLog(t, `"status":401,`)
	// A call without an id is given one, as an HTTP request is.
	if !regexp.MustCompile(`"status":401,"duration":"[^"]+","request_id":"[0-9a-f]{24}","key":"-"}`).MatchString(s.stderr.String()) {
		t.Errorf("no generated request id on the unauthenticated call's line:\n%s", s.stderr.String())
	}
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		s.done <- nil // for start's cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop")
	}
	if !strings.Contains(s.stdout.String(), "budgetd: stopped") {
		t.Errorf("no stop line: %s", s.stdout.String())
	}
}

// TestGRPCExposure: --grpc-addr, like --addr, is refused on an address
// other machines may reach unless authentication is on.
func TestGRPCExposure(t *testing.T) {
	err := run(context.Background(), []string{"--grpc-addr", "0.0.0.0:0"}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "refusing to serve without authentication on 0.0.0.0:0") || !strings.Contains(err.Error(), "--grpc-addr") {
		t.Fatalf("run: %v", err)
	}
}

// dialGRPC is a client of the gRPC listener at addr without TLS.
func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// healthWithin is a health check that waits at most d.
func healthWithin(conn *grpc.ClientConn, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	return err
}

// TestGRPCConnectionCap: --max-conns bounds the connections of both
// listeners together. With every slot held by gRPC connections that are
// in use (never shed), a further gRPC client and an HTTP one wait, and
// are served once a slot frees.
func TestGRPCConnectionCap(t *testing.T) {
	s := start(t, "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--max-conns", "2", "--max-conns-per-ip", "0")
	addr := s.waitGRPC(t)
	first, second := dialGRPC(t, addr), dialGRPC(t, addr)
	for i, c := range []*grpc.ClientConn{first, second} {
		if err := healthWithin(c, 5*time.Second); err != nil {
			t.Fatalf("connection %d of 2: %v", i+1, err)
		}
	}
	third := dialGRPC(t, addr)
	if err := healthWithin(third, 1500*time.Millisecond); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a third gRPC connection past --max-conns 2: %v, want it kept waiting", err)
	}
	hc := &http.Client{Timeout: 1500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	if res, err := hc.Get(s.url + "/healthz"); err == nil {
		res.Body.Close()
		t.Fatalf("an HTTP client was served while gRPC connections held every slot: %d", res.StatusCode)
	}
	first.Close()
	start := time.Now()
	if err := healthWithin(third, 10*time.Second); err != nil {
		t.Fatalf("the third gRPC connection once a slot was free: %v", err)
	}
	t.Logf("served %v after a slot freed", time.Since(start))
}

// TestGRPCIdleConnectionsAreClosed: a gRPC connection that has had no call
// for --idle-timeout is closed as an idle HTTP one is, so a gateway that
// went away cannot hold a slot of --max-conns for good: with the only slot
// held by a gRPC client that made one call, an HTTP client is served once
// the idle timeout has passed, and the gRPC client, dialling again, too.
func TestGRPCIdleConnectionsAreClosed(t *testing.T) {
	s := start(t, "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--max-conns", "1", "--max-conns-per-ip", "0",
		"--idle-timeout", "1s")
	addr := s.waitGRPC(t)
	gw := dialGRPC(t, addr)
	if err := healthWithin(gw, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	begin := time.Now()
	res, err := hc.Get(s.url + "/healthz")
	if err != nil {
		t.Fatalf("an HTTP client behind an idle gRPC connection holding the only slot: %v", err)
	}
	res.Body.Close()
	if waited := time.Since(begin); waited < 500*time.Millisecond {
		t.Fatalf("the HTTP client was served after %v, before the gRPC connection could have idled out", waited)
	}
	if err := healthWithin(gw, 10*time.Second); err != nil {
		t.Fatalf("the gRPC client after its connection was closed for idling: %v", err)
	}
}

// TestGRPCSilentConnectionsAreShed: connections to the gRPC listener that
// never finish their handshake are shed like HTTP connections that send no
// request header: once every slot is taken, after 1 s, so a client queued
// behind them is served well within the 10 s handshake timeout. (This
// also checks that the gRPC server still clears a connection's deadline
// after its handshake, which is how connCap knows it is done: without it
// every gRPC connection would stay "silent" and be shed.)
func TestGRPCSilentConnectionsAreShed(t *testing.T) {
	s := start(t, "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--max-conns", "3", "--max-conns-per-ip", "0")
	addr := s.waitGRPC(t)
	// A gateway's connection, in use before the flood.
	var dials atomic.Int32
	busy, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if err := healthWithin(busy, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	late := dialGRPC(t, addr)
	start := time.Now()
	if err := healthWithin(late, 5*time.Second); err != nil {
		t.Fatalf("a client behind silent connections: %v", err)
	}
	t.Logf("served after %v", time.Since(start))
	// The connection that finished its handshake was not shed for them.
	if err := healthWithin(busy, time.Second); err != nil || dials.Load() != 1 {
		t.Fatalf("the connection in use: %v, dialled %d times", err, dials.Load())
	}
}
