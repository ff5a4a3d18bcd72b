package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/internal/testenv"
)

// TestWebhookFlagsRefuse: bad webhook options refuse to start (exit 2)
// with a message that says what to fix, by flag and by environment.
func TestWebhookFlagsRefuse(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	empty := filepath.Join(dir, "empty")
	bad := filepath.Join(dir, "bad")
	for f, s := range map[string]string{good: newSecret(t) + "\n", empty: " \n", bad: "whsec_not base64!"} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--webhook-url", "https://example.com/hook"}, nil, "--webhook-url needs --webhook-secret-file"},
		{nil, map[string]string{"BUDGETD_WEBHOOK_URL": "https://example.com/hook"}, "--webhook-url needs --webhook-secret-file"},
		{[]string{"--webhook-secret-file", good}, nil, "--webhook-secret-file is given without --webhook-url"},
		{[]string{"--webhook-url", "ftp://example.com/hook", "--webhook-secret-file", good}, nil, "want an http:// or https:// URL"},
		{[]string{"--webhook-url", "example.com/hook", "--webhook-secret-file", good}, nil, "want an http:// or https:// URL"},
		{[]string{"--webhook-url", "http://%zz", "--webhook-secret-file", good}, nil, "want an http:// or https:// URL"},
		{[]string{"--webhook-url", "https:///nohost", "--webhook-secret-file", good}, nil, "want an http:// or https:// URL"},
		{[]string{"--webhook-url", "https://example.com/hook", "--webhook-secret-file", filepath.Join(dir, "missing")}, nil, "--webhook-secret-file: open"},
		{[]string{"--webhook-url", "https://example.com/hook"}, map[string]string{"BUDGETD_WEBHOOK_SECRET_FILE": empty}, "is empty"},
		{[]string{"--webhook-url", "https://example.com/hook", "--webhook-secret-file", bad}, nil, "is not base64"},
	} {
		err := run(context.Background(), append([]string{"--addr", "127.0.0.1:0"}, c.args...), env(c.env), io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || exitCode(err) != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: %v, want a usage error saying %q", c.args, c.env, err, c.want)
		}
	}
	cfg, _, err := parseConfig(nil, env(map[string]string{"BUDGETD_WEBHOOK_URL": "https://example.com/h", "BUDGETD_WEBHOOK_SECRET_FILE": good}), io.Discard)
	if err != nil || cfg.webhookURL != "https://example.com/h" || cfg.webhookSecret != good {
		t.Fatalf("from the environment: %+v %v", cfg, err)
	}
}

// newSecret is a Standard Webhooks secret: whsec_ and the base64 of 32
// random bytes.
func newSecret(t testing.TB) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:])
}

// TestWebhookEndToEnd is issue 25's "done when": budgetd with
// --webhook-url, a monthly limit of 5000 with thresholds 50% and 80%, a
// charge past 80%: the receiver gets exactly two events, each accepted by
// client.NewWebhookVerifier. On every store.
func TestWebhookEndToEnd(t *testing.T) {
	stores := redisURLs(t)
	stores["memory"], stores["postgres"], stores["mysql"] = "memory", storeURL(t, "BUDGETD_TEST_POSTGRES"), testenv.MySQLDatabase(t)
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			secret := newSecret(t)
			file := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			v, err := client.NewWebhookVerifier(secret, 0)
			if err != nil {
				t.Fatal(err)
			}
			limit := fmt.Sprintf("hook-e2e-%d", time.Now().UnixNano())
			var (
				mu  sync.Mutex
				got []client.Event
			)
			arrived := make(chan struct{}, 1)
			recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				e, err := v.Verify(r.Header, body)
				if err != nil {
					t.Errorf("the verifier refuses a webhook: %v", err)
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				if e.Limit == limit { // a durable store's outbox may hold other tests' events
					mu.Lock()
					got = append(got, e)
					mu.Unlock()
					select {
					case arrived <- struct{}{}:
					default:
					}
				}
				w.WriteHeader(http.StatusOK)
			}))
			defer recv.Close()
			received := func() []client.Event {
				mu.Lock()
				defer mu.Unlock()
				return append([]client.Event(nil), got...)
			}

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--store", store, "--webhook-url", recv.URL + "/budgetd"},
					env(map[string]string{"BUDGETD_WEBHOOK_SECRET_FILE": file}), &stdout, &stderr)
			}()
			base := waitURL(t, &stdout, done)
			req, _ := http.NewRequest("PUT", base+"/v1/limits/"+limit, strings.NewReader(`{"capacity":"5000","period":{"every":"month"},"thresholds":["50%","80%"]}`))
			if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
				t.Fatalf("PUT limit: %v %v", res, err)
			}
			res, err := http.Post(base+"/v1/limits/"+limit+"/buckets/team-a/fillup", "application/json", strings.NewReader(`{"cost":"4100"}`))
			if err != nil || res.StatusCode != 200 {
				t.Fatalf("fillup: %v %v", res, err)
			}
			res.Body.Close()

			// A lease left by an earlier run that died is taken over after
			// its TTL (30s).
			deadline := time.After(60 * time.Second)
			for len(received()) < 2 {
				select {
				case <-arrived:
				case <-deadline:
					t.Fatalf("received %d events in 60s\n%s", len(received()), stderr.String())
				}
			}
			res, err = http.Get(base + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(res.Body)
			res.Body.Close()
			for _, m := range []string{`budgetd_webhook_deliveries_total{outcome="delivered"}`, `budgetd_events_total{type="threshold.crossed"}`, "budgetd_webhook_delivery_lag_seconds_count"} {
				if !strings.Contains(string(metrics), m) {
					t.Errorf("/metrics has no %s", m)
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("run: %v\n%s", err, stderr.String())
			}
			es := received()
			if len(es) != 2 {
				t.Fatalf("received %d events, want exactly 2: %+v", len(es), es)
			}
			for i, th := range []string{"50%", "80%"} {
				e := es[i]
				if e.Type != "threshold.crossed" || e.Threshold != th || e.Key != "team-a" || e.Used.String() != "4100" || e.Capacity.String() != "5000" || e.PeriodStart == nil {
					t.Errorf("event %d: %+v, want %s crossed at 4100 of 5000", i, e, th)
				}
			}
			if es[0].ID == es[1].ID {
				t.Errorf("two events with one id %s", es[0].ID)
			}
		})
	}
}
