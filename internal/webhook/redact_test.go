package webhook_test

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/webhook"
)

// TestRedactURL: a URL's password, query and fragment are masked, the
// rest kept, for webhook and store URLs alike (issue 43).
func TestRedactURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://hooks.example.com/in?token=s3cret", "https://hooks.example.com/in?REDACTED"},
		{"https://hooks.example.com/in?a=1&token=s3cret#frag-s3cret", "https://hooks.example.com/in?REDACTED#REDACTED"},
		{"https://bot:s3cret@hooks.example.com/in", "https://bot:REDACTED@hooks.example.com/in"},
		{"http://bot:***@127.0.0.1:1/in?s3cret", "http://bot:REDACTED@127.0.0.1:1/in?REDACTED"}, // net/http's *url.Error form
		{"https://hooks.example.com/in", "https://hooks.example.com/in"},
		{"https://bot@hooks.example.com/in", "https://bot@hooks.example.com/in"},
		{"postgres://budgetd:s3cret@db:5432/budgetd?sslmode=require", "postgres://budgetd:REDACTED@db:5432/budgetd?REDACTED"},
		{"postgres://budgetd@db/budgetd?password=s3cret", "postgres://budgetd@db/budgetd?REDACTED"},
		{"redis://:s3cret@cache:6379/0", "redis://:REDACTED@cache:6379/0"},
		{"mysql://budgetd:s3cret@db:3306/budgetd", "mysql://budgetd:REDACTED@db:3306/budgetd"},
		{"memory", "memory"},
		{"postgres://budgetd:s3cret@db:5432/%zz?password=s3cret", "…@db:5432/%zz?REDACTED"}, // does not parse
		{"http://%zz/in?token=s3cret", "http://%zz/in?REDACTED"},
	} {
		got := webhook.RedactURL(c.in)
		if got != c.want || strings.Contains(got, "s3cret") {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// logWriter records what a logger writes and signals each line that
// contains mark.
type logWriter struct {
	mu   sync.Mutex
	b    bytes.Buffer
	mark string
	seen chan struct{}
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.Contains(p, []byte(w.mark)) {
		select {
		case w.seen <- struct{}{}:
		default:
		}
	}
	return w.b.Write(p)
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestFailedDeliveryLogsNoSecret: a request that fails before any answer
// is logged with its error, which names the URL; the receiver's token in
// the query and the password never appear in the log (issue 43).
func TestFailedDeliveryLogsNoSecret(t *testing.T) {
	st := memory.New()
	em := newEmitter(t, st)
	down := httptest.NewServer(nil)
	u := strings.Replace(down.URL, "http://", "http://bot:pa55word@", 1) + "/in?token=t0ken-s3cret&x=1"
	down.Close() // connection refused: a *url.Error with the URL in it
	w := &logWriter{mark: "webhook: event given up", seen: make(chan struct{}, 1)}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d := webhook.New(u, key(t), st, st, fast(webhook.WithLogger(log), webhook.WithRetryFor(0))...)
	em.bucket(t, "k")
	run(t, d)
	select {
	case <-w.seen:
	case <-time.After(20 * time.Second):
		t.Fatalf("no event given up in 20s; the log: %s", w.String())
	}
	out := w.String()
	for _, secret := range []string{"t0ken-s3cret", "pa55word", "token="} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q: %s", secret, out)
		}
	}
	if !strings.Contains(out, "/in?REDACTED") {
		t.Errorf("the failure does not name the URL, redacted: %s", out)
	}
}
