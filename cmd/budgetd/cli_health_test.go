package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCLIHealth: budgetd health exits 0 on a budgetd that serves calls,
// 4 on one whose /readyz answers 503 and on an address nothing listens on,
// 2 with an argument it does not take.
func TestCLIHealth(t *testing.T) {
	up := startBudgetd(t)
	if out, code := cliRun(t, up, "health"); code != 0 || strings.TrimSpace(out) != "ready" {
		t.Fatalf("health on a serving budgetd: exit %d, %q", code, out)
	}
	if out, code := cliRun(t, up, "health", "-q"); code != 0 || out != "" {
		t.Fatalf("health -q: exit %d, %q", code, out)
	}
	if out, code := cliRun(t, up, "health", "extra"); code != 2 {
		t.Fatalf("health extra: exit %d, %q", code, out)
	}

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			t.Errorf("health asked %s", r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"code":"store_unavailable","detail":"store unavailable"}`))
	}))
	defer down.Close()
	if out, code := cliRun(t, down.URL, "health", "--timeout", "2s"); code != exitUnreachable || !strings.Contains(out, "store_unavailable") {
		t.Fatalf("health on a budgetd without its store: exit %d, %q", code, out)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	if out, code := cliRun(t, closed, "health", "--timeout", "2s"); code != exitUnreachable {
		t.Fatalf("health on a closed port: exit %d, %q", code, out)
	}
}
