package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
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
