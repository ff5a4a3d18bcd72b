package http_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	budgethttp "github.com/budgetd/budgetd/internal/http"
)

// TestRPCRequestID: a gRPC call's request id is the caller's x-request-id
// when an HTTP request's X-Request-Id would be kept, else one made as HTTP
// makes them; the access-log line of the call carries it.
func TestRPCRequestID(t *testing.T) {
	var buf bytes.Buffer
	access := budgethttp.NewAccessLog(&buf, budgethttp.AccessJSON)
	var rpc *budgethttp.RPC
	openHandler(t, budgethttp.WithRPC(&rpc), budgethttp.WithAccessLog(access))
	long := strings.Repeat("a", 128)
	for _, tc := range []struct {
		given string
		keep  bool
	}{
		{"abc-123_x.y:z", true}, {long, true},
		{long + "a", false}, {"has space", false}, {"ünï", false}, {"", false}, {"bad\x01", false},
	} {
		got := rpc.RequestID(tc.given)
		if tc.keep && got != tc.given || !tc.keep && !generatedID.MatchString(got) {
			t.Errorf("x-request-id %q: id %q", tc.given, got)
		}
	}
	if a, b := rpc.RequestID(""), rpc.RequestID(""); a == b {
		t.Errorf("two calls got the same id %q", a)
	}

	const method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	rpc.Call(context.Background(), method, "Unavailable", 3*time.Millisecond, "gateway", "gw-42")
	if err := access.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `"msg":"request","method":"GRPC","route":"` + method + `","status":503,"duration":"3ms","request_id":"gw-42","key":"gateway"}`
	if !strings.Contains(buf.String(), want) {
		t.Errorf("access log:\n%s\nwant a line with %s", buf.String(), want)
	}
}
