package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMTLSIsAuthentication: with client certificates required and no key
// file, budgetd says callers are authenticated by certificate rather than
// warning that authentication is off, and may listen beyond loopback.
func TestMTLSIsAuthentication(t *testing.T) {
	dir := t.TempDir()
	tlsFiles(t, dir, "mtls")
	tlsArgs := []string{"--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem"), "--tls-client-ca", filepath.Join(dir, "ca.pem")}
	s := start(t, append([]string{"--addr", "127.0.0.1:0"}, tlsArgs...)...)
	s.waitLog(t, "callers are authenticated by client certificate")
	if strings.Contains(s.stderr.String(), "authentication is off") {
		t.Fatalf("warns that authentication is off while client certificates are required:\n%s", s.stderr.String())
	}
	cfg, _, err := parseConfig(append([]string{"--addr", "0.0.0.0:8443"}, tlsArgs...), env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkExposure(cfg); err != nil {
		t.Fatalf("client certificates on a public address: %v", err)
	}
	cfg.tlsClientCA = ""
	if err := checkExposure(cfg); err == nil {
		t.Fatal("TLS without client certificates or keys on a public address was allowed")
	}
}

// TestSilentConnectionsAreShed fills every slot of --max-conns, and some of
// the backlog, with connections that send nothing, all from one address
// (no per-address cap): a client queued behind them is served within a few
// seconds — the silent connections have a short header deadline once the
// cap is reached — instead of waiting for the 10 s header timeout.
func TestSilentConnectionsAreShed(t *testing.T) {
	s := start(t, "--addr", "127.0.0.1:0", "--max-conns", "8", "--max-conns-per-ip", "0")
	addr := strings.TrimPrefix(s.url, "http://")
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range 12 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	if code := call(t, c, "GET", s.url+"/healthz", ""); code != 200 {
		t.Fatalf("a client behind the silent connections: %d", code)
	}
	t.Logf("served after %v", time.Since(start))
	// The silent connections that held the slots were closed.
	closed, deadline := 0, time.Now().Add(2*time.Second)
	for _, sc := range silent[:8] {
		sc.SetReadDeadline(deadline)
		if _, err := sc.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	if closed < 4 {
		t.Fatalf("%d of the first 8 silent connections were closed, want at least 4", closed)
	}
}
