package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
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
	resp, err := rls.ShouldRateLimit(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok-gateway"), req)
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with the gateway's key: %v %v", resp, err)
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
	s.waitLog(t, `"status":401,`)
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
