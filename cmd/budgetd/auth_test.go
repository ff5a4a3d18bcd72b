package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/mysql"
)

// started is a run in the background.
type started struct {
	url            string
	stdout, stderr *syncBuffer
	done           chan error
	cancel         context.CancelFunc
}

func start(t *testing.T, args ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan error, 1), cancel: cancel}
	go func() { s.done <- run(ctx, args, env(nil), s.stdout, s.stderr) }()
	s.url = waitURL(t, s.stdout, s.done)
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
	})
	return s
}

// waitLog waits until stderr holds want.
func (s *started) waitLog(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", want, s.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func call(t *testing.T, c *http.Client, method, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{"capacity":"5","leak":{"amount":"1","per":"1h"}}`))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// mintKey runs `budgetd token` and returns the token and its file line.
func mintKey(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), append([]string{"token"}, args...), env(nil), &out, &errOut); err != nil {
		t.Fatalf("token %v: %v", args, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "bdg_") || !strings.Contains(errOut.String(), "shown only now") {
		t.Fatalf("token output %q / %q", out.String(), errOut.String())
	}
	return lines[0], lines[1]
}

func TestOpenModeOnlyOnLoopback(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:0", "example.com:0"} {
		err := run(context.Background(), []string{"--addr", addr}, env(nil), io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--auth-file") || !strings.Contains(err.Error(), "--insecure-no-auth") {
			t.Errorf("--addr %s without keys: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:8080", "127.1.2.3:1"} {
		if !isLoopback(addr) {
			t.Errorf("%s is loopback", addr)
		}
	}
	cfg, _, err := parseConfig(nil, env(nil), io.Discard)
	if err != nil || cfg.addr != "127.0.0.1:8080" {
		t.Fatalf("default address %q %v", cfg.addr, err)
	}
	s := start(t, "--addr", "0.0.0.0:0", "--insecure-no-auth")
	s.waitLog(t, "authentication is off")
	if code := call(t, http.DefaultClient, "PUT", strings.Replace(s.url, "0.0.0.0", "127.0.0.1", 1)+"/v1/limits/x", ""); code != 200 {
		t.Fatalf("open mode PUT: %d", code)
	}
}

func TestCommandsTakeFlagsInAnyOrder(t *testing.T) {
	for _, args := range [][]string{{"migrate", "--store", "memory"}, {"--store", "memory", "migrate"}, {"migrate", "--store=memory", "--log-level", "warn"}} {
		err := run(context.Background(), args, env(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "migrate needs --store postgres://") {
			t.Errorf("%v: %v", args, err)
		}
	}
	var out bytes.Buffer
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out.Reset()
		if err := run(context.Background(), args, env(nil), &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "budgetd ") || !strings.Contains(out.String(), "go1.") {
			t.Errorf("%v: %q %v", args, out.String(), err)
		}
	}
	for _, args := range [][]string{{"token"}, {"token", "a", "b", "--scopes", "read"}, {"token", "a"}, {"token", "a", "--scopes", "write"}, {"token", "a", "--scopes", "read", "--limits", "Bad"}} {
		var ue usageError
		if err := run(context.Background(), args, env(nil), io.Discard, io.Discard); !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	_, line := mintKey(t, "svc", "--scopes", "charge", "--limits", "team-*")
	if f := strings.Fields(line); len(f) != 4 || f[0] != "svc" || !strings.HasPrefix(f[1], "sha256:") || f[2] != "charge" || f[3] != "team-*" {
		t.Fatalf("file line %q", line)
	}
	_, line = mintKey(t, "--scopes", "read", "dash")
	if f := strings.Fields(line); len(f) != 3 || f[0] != "dash" {
		t.Fatalf("file line %q", line)
	}
}

func TestAuthFileAndReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	admin, adminLine := mintKey(t, "ops", "--scopes", "admin")
	reader, readerLine := mintKey(t, "dash", "--scopes", "read")
	if err := os.WriteFile(file, []byte("# keys\n"+adminLine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A bad file refuses to start, naming the line.
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte(adminLine+"\n"+"ops2 "+admin+" read\n"), 0o600)
	err := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--auth-file", bad}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), admin) {
		t.Fatalf("a plain-text token: %v", err)
	}
	os.WriteFile(bad, []byte(adminLine+"\n"+adminLine+"\n"), 0o600)
	if err := run(context.Background(), []string{"--auth-file", bad}, env(nil), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a duplicate name: %v", err)
	}

	s := start(t, "--addr", "0.0.0.0:0", "--auth-file", file, "--log-format", "json")
	url := strings.Replace(s.url, "0.0.0.0", "127.0.0.1", 1)
	s.waitLog(t, `"msg":"authentication is on"`)
	if code := call(t, http.DefaultClient, "PUT", url+"/v1/limits/x", ""); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	if code := call(t, http.DefaultClient, "GET", url+"/v1/limits/x", reader); code != 401 {
		t.Fatalf("a key not yet in the file: %d", code)
	}
	if code := call(t, http.DefaultClient, "PUT", url+"/v1/limits/x", admin); code != 200 {
		t.Fatalf("admin: %d", code)
	}

	// SIGHUP loads a new key...
	os.WriteFile(file, []byte(adminLine+"\n"+readerLine+"\n"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	s.waitLog(t, `"msg":"key file reloaded","auth_file":"`+file+`","keys":2`)
	if code := call(t, http.DefaultClient, "GET", url+"/v1/limits/x", reader); code != 200 {
		t.Fatalf("reader after reload: %d", code)
	}
	// ...and a file that does not parse keeps the keys in force.
	os.WriteFile(file, []byte(readerLine+"\nbroken line\n"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	s.waitLog(t, `key file not reloaded`)
	s.waitLog(t, `line 2: want NAME sha256:HEX SCOPES [LIMITS]`)
	if code := call(t, http.DefaultClient, "PUT", url+"/v1/limits/x", admin); code != 200 {
		t.Fatalf("admin after a failed reload: %d", code)
	}
	if code := call(t, http.DefaultClient, "GET", url+"/metrics", reader); code != 200 {
		t.Fatalf("metrics with a read key: %d", code)
	}

	// A 1 MB header is refused without harm.
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		conn.Write([]byte("GET /v1/limits HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + strings.Repeat("a", 1<<20) + "\r\n\r\n"))
	}()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	status, _ := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if !strings.Contains(status, " 431 ") {
		t.Fatalf("1 MB header: %q", status)
	}
	if code := call(t, http.DefaultClient, "GET", url+"/v1/limits/x", admin); code != 200 {
		t.Fatalf("after a 1 MB header: %d", code)
	}
	for _, tok := range []string{admin, reader} {
		if strings.Contains(s.stderr.String(), tok) {
			t.Fatal("a token is in the log")
		}
	}
	s.waitLog(t, `"msg":"request","method":"PUT","route":"/v1/limits/:name","status":200`)
}

// tlsFiles writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir; it returns the CA pool and the client certificate.
func tlsFiles(t *testing.T, dir, prefix string) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: prefix + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage, name string) ([]byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	}
	certPEM, keyPEM := issue(2, x509.ExtKeyUsageServerAuth, prefix+" server")
	os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "key.pem"), keyPEM, 0o600)
	os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600)
	clientPEM, clientKey := issue(3, x509.ExtKeyUsageClientAuth, prefix+" client")
	client, err := tls.X509KeyPair(clientPEM, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, client
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	pool1, client1 := tlsFiles(t, dir, "first")
	s := start(t, "--addr", "127.0.0.1:0", "--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem"),
		"--tls-client-ca", filepath.Join(dir, "ca.pem"))
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("serving on %s", s.url)
	}
	clientFor := func(pool *x509.CertPool, certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}, DisableKeepAlives: true}}
	}
	if code := call(t, clientFor(pool1, client1), "GET", s.url+"/healthz", ""); code != 200 {
		t.Fatalf("with a client certificate: %d", code)
	}
	if _, err := clientFor(pool1).Get(s.url + "/healthz"); err == nil {
		t.Fatal("served a client without a certificate")
	}
	if res, err := http.Get(strings.Replace(s.url, "https", "http", 1) + "/healthz"); err == nil && res.StatusCode != 400 {
		t.Fatalf("plain HTTP: %d", res.StatusCode)
	}

	// SIGHUP loads new files; broken files keep the ones in force.
	pool2, client2 := tlsFiles(t, dir, "second")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	s.waitLog(t, "TLS files reloaded")
	if code := call(t, clientFor(pool2, client2), "GET", s.url+"/healthz", ""); code != 200 {
		t.Fatalf("after reload: %d", code)
	}
	if _, err := clientFor(pool1, client1).Get(s.url + "/healthz"); err == nil {
		t.Fatal("the old certificates still work after reload")
	}
	os.WriteFile(filepath.Join(dir, "key.pem"), []byte("not a key"), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	s.waitLog(t, "TLS files not reloaded")
	if code := call(t, clientFor(pool2, client2), "GET", s.url+"/healthz", ""); code != 200 {
		t.Fatalf("after a failed reload: %d", code)
	}

	for _, args := range [][]string{{"--tls-cert", "x"}, {"--tls-client-ca", "x"}, {"--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem")}} {
		if err := run(context.Background(), append([]string{"--addr", "127.0.0.1:0"}, args...), env(nil), io.Discard, io.Discard); err == nil {
			t.Errorf("%v started", args)
		}
	}
}

// TestConnectionCap fills the two slots of --max-conns 2 with an idle
// keep-alive connection and a connection that sends nothing: a new client
// is still answered, because the idle connection gives up its slot.
func TestConnectionCap(t *testing.T) {
	s := start(t, "--addr", "127.0.0.1:0", "--max-conns", "2")
	addr := strings.TrimPrefix(s.url, "http://")
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	if status, _ := bufio.NewReader(idle).ReadString('\n'); !strings.Contains(status, " 200 ") {
		t.Fatalf("first connection: %q", status)
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if code := call(t, c, "GET", s.url+"/healthz", ""); code != 200 {
		t.Fatalf("third client: %d", code)
	}
}

// TestReadyzDuringShutdown: once shutdown begins /readyz answers 503 while
// the listener still accepts, for --shutdown-delay; then budgetd stops.
func TestReadyzDuringShutdown(t *testing.T) {
	s := start(t, "--addr", "127.0.0.1:0", "--shutdown-delay", "8s")
	if code := call(t, http.DefaultClient, "GET", s.url+"/readyz", ""); code != 200 {
		t.Fatalf("/readyz: %d", code)
	}
	s.cancel()
	s.waitLog(t, "shutting down")
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if code := call(t, c, "GET", s.url+"/readyz", ""); code != 503 {
		t.Fatalf("/readyz while shutting down: %d", code)
	}
	if code := call(t, c, "GET", s.url+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz while shutting down: %d", code)
	}
	if code := call(t, c, "HEAD", s.url+"/readyz", ""); code != 503 {
		t.Fatalf("HEAD /readyz while shutting down: %d", code)
	}
}

func TestNewOptions(t *testing.T) {
	cfg, words, err := parseConfig([]string{"--max-conns", "10", "migrate"}, env(map[string]string{
		"BUDGETD_INSECURE_NO_AUTH": "true", "BUDGETD_LOG_FORMAT": "json", "BUDGETD_IDLE_TIMEOUT": "5s", "BUDGETD_AUTH_FILE": "/k",
	}), io.Discard)
	if err != nil || !cfg.insecureNoAuth || cfg.logFormat != "json" || cfg.maxConns != 10 || cfg.idleTimeout != 5*time.Second ||
		cfg.authFile != "/k" || len(words) != 1 || words[0] != "migrate" {
		t.Fatalf("%+v %v %v", cfg, words, err)
	}
	if cfg, _, err := parseConfig(nil, env(map[string]string{"BUDGETD_MYSQL_CACHE": "1000"}), io.Discard); err != nil || cfg.mysqlCache != 1000 {
		t.Fatalf("BUDGETD_MYSQL_CACHE=1000: %+v %v", cfg, err)
	}
	if cfg, _, err := parseConfig([]string{"--mysql-cache", "0"}, env(nil), io.Discard); err != nil || cfg.mysqlCache != 0 {
		t.Fatalf("--mysql-cache 0 (the cache off): %+v %v", cfg, err)
	}
	if cfg, _, err := parseConfig([]string{"--mysql-group-commit=false"}, env(nil), io.Discard); err != nil || cfg.mysqlGroup {
		t.Fatalf("--mysql-group-commit=false: %+v %v", cfg, err)
	}
	if cfg, _, err := parseConfig(nil, env(map[string]string{"BUDGETD_MYSQL_GROUP_COMMIT": "false"}), io.Discard); err != nil || cfg.mysqlGroup {
		t.Fatalf("BUDGETD_MYSQL_GROUP_COMMIT=false: %+v %v", cfg, err)
	}
	if cfg, _, _ := parseConfig(nil, env(nil), io.Discard); cfg.insecureNoAuth || cfg.maxConns != 4096 || cfg.idleTimeout != 30*time.Second || cfg.logFormat != "text" || cfg.mysqlCache != mysql.DefaultCacheEntries || !cfg.mysqlGroup {
		t.Fatalf("defaults %+v", cfg)
	}
	for _, args := range [][]string{{"--log-format", "xml"}, {"--max-conns", "0"}, {"--idle-timeout", "0s"}, {"--tls-key", "k"},
		{"--insecure-no-auth=maybe"}, {"--shutdown-delay", "-1s"}, {"--mysql-cache", "-1"}, {"--mysql-cache", "many"}, {"--mysql-group-commit=maybe"}} {
		var ue usageError
		if _, _, err := parseConfig(args, env(nil), io.Discard); !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestConnectionCapPerIP: one address holding connections that send nothing
// (each would keep a slot until the header timeout) cannot take every slot:
// past --max-conns-per-ip its connections are closed at once, and a client
// from another address is still answered.
func TestConnectionCapPerIP(t *testing.T) {
	s := start(t, "--addr", "127.0.0.1:0", "--max-conns", "4", "--max-conns-per-ip", "2")
	addr := strings.TrimPrefix(s.url, "http://")
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var silent []net.Conn
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	for range 10 {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			break // the backlog is full: enough
		}
		silent = append(silent, c)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if code := call(t, c, "GET", s.url+"/healthz", ""); code != 200 {
		t.Fatalf("a client from another address: %d", code)
	}
	// The flooding address's connections past the second were closed.
	closed := 0
	for _, sc := range silent {
		sc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := sc.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	if want := len(silent) - 2; closed < want {
		t.Fatalf("%d of %d flooding connections closed, want at least %d", closed, len(silent), want)
	}
}
