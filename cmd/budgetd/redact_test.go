package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/testenv"
)

// TestStoreURLSecretsNotPrinted: a store URL's password, in its userinfo or
// its query (libpq's password=), is masked in what budgetd prints when the
// store does not open and when it serves (issue 43).
func TestStoreURLSecretsNotPrinted(t *testing.T) {
	for _, store := range []string{
		"postgres://budgetd@127.0.0.1:1/budgetd?password=q-s3cret&sslmode=disable",
		"postgres://budgetd:u-s3cret@127.0.0.1:1/budgetd?sslmode=disable",
		"redis://:u-s3cret@127.0.0.1:1/0",
		"mysql://budgetd:u-s3cret@127.0.0.1:1/budgetd",
	} {
		var stdout, stderr syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := run(ctx, []string{"--addr", "127.0.0.1:0", "--store", store}, env(nil), &stdout, &stderr)
		cancel()
		if err == nil {
			t.Fatalf("%s: run served a store that is not there", store)
		}
		out := err.Error() + stdout.String() + stderr.String()
		if strings.Contains(out, "s3cret") || !strings.Contains(out, "127.0.0.1:1") {
			t.Errorf("%s: printed %q", store, out)
		}
	}

	pg := storeURL(t, "BUDGETD_TEST_POSTGRES") + "&password=q-s3cret" // trust authentication: not asked for
	for name, store := range map[string]string{"postgres": pg, "mysql": testenv.MySQLDatabase(t)} {
		t.Run(name, func(t *testing.T) {
			u, err := url.Parse(store)
			if err != nil {
				t.Fatal(err)
			}
			secret := u.Query().Get("password")
			if pw, ok := u.User.Password(); ok {
				secret = pw
			}
			if secret == "" {
				t.Fatalf("%s: no password to look for", store)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--store", store}, env(nil), &stdout, &stderr)
			}()
			waitURL(t, &stdout, done)
			stopRun(t, cancel, done)
			out := stdout.String() + stderr.String()
			if strings.Contains(out, secret) || !strings.Contains(out, name+" store at "+name+"://") {
				t.Errorf("the output holds the password %q or does not name the store: %s", secret, out)
			}
		})
	}
}

// TestWebhookURLSecretsNotLogged: the receiver's token in the webhook URL's
// query and the password in its userinfo appear neither in the start-up
// log nor in the log of a failed delivery (issue 43).
func TestWebhookURLSecretsNotLogged(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(newSecret(t)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	down := httptest.NewServer(nil)
	hook := strings.Replace(down.URL, "http://", "http://bot:pa55word@", 1) + "/hook?token=t0ken-s3cret"
	down.Close() // every delivery fails with the URL in its error

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--log-level", "debug", "--webhook-url", hook, "--webhook-secret-file", file},
			env(nil), &stdout, &stderr)
	}()
	base := waitURL(t, &stdout, done)
	req, _ := http.NewRequest("PUT", base+"/v1/limits/hook", strings.NewReader(`{"capacity":"10","leak":{"amount":"1","per":"1h"},"thresholds":["50%"]}`))
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("PUT limit: %v %v", res, err)
	}
	if res, err := http.Post(base+"/v1/limits/hook/buckets/k/fillup", "application/json", strings.NewReader(`{"cost":"6"}`)); err != nil || res.StatusCode != 200 {
		t.Fatalf("fillup: %v %v", res, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), "webhook: delivery failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed delivery logged in 20s: %s", stderr.String())
		}
		select {
		case err := <-done:
			t.Fatalf("run returned: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stopRun(t, cancel, done)
	out := stdout.String() + stderr.String()
	for _, s := range []string{"t0ken-s3cret", "pa55word", "token="} {
		if strings.Contains(out, s) {
			t.Errorf("the output holds %q: %s", s, out)
		}
	}
	if !strings.Contains(out, "webhook: events are sent to http://bot:REDACTED@") || !strings.Contains(out, "/hook?REDACTED") {
		t.Errorf("the log does not name the receiver, redacted: %s", out)
	}
}
