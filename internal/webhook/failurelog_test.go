package webhook_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/webhook"
)

// TestFailedAttemptsLoggedRateLimited: a receiver that answers every
// request with a 503 gets one WARN line for its first failed attempt, none
// for the next ones within the interval, and, once the interval has passed
// (the test moves the limiter's clock while the receiver answers attempt
// k+1), a second line that counts the k-1 attempts not logged. The lines
// name the URL with its query redacted (issue 43).
func TestFailedAttemptsLoggedRateLimited(t *testing.T) {
	const k = 5
	st := memory.New()
	em := newEmitter(t, st)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var offset atomic.Int64 // added to base by the limiter's clock
	now := func() time.Time { return base.Add(time.Duration(offset.Load())) }
	var n atomic.Int64
	attempts := make(chan int64, 1000)
	r := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ client.Event) bool {
		i := n.Add(1)
		if i == k+1 {
			offset.Add(int64(time.Minute)) // the interval has passed before attempt k+1 fails
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
		select {
		case attempts <- i:
		default:
		}
		return true
	})
	const mark = `msg="webhook: delivery failed"`
	w := &logWriter{mark: mark, seen: make(chan struct{}, 1)}
	log := slog.New(slog.NewTextHandler(w, nil))
	url := r.srv.URL + "/in?token=t0ken-s3cret"
	d := webhook.New(url, key(t), st, st, fast(webhook.WithLogger(log), webhook.WithFailureLog(time.Minute), webhook.WithFailureLogClock(now))...)
	em.bucket(t, "k")
	stop := run(t, d)

	lines := func() []string {
		var out []string
		for _, l := range strings.Split(w.String(), "\n") {
			if strings.Contains(l, mark) {
				out = append(out, l)
			}
		}
		return out
	}
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	// Attempt k+3 reached the receiver: attempts 1 .. k+2 have failed and
	// been logged or not (one bucket's attempts are sequential).
	for i := int64(0); i < k+3; {
		select {
		case i = <-attempts:
		case <-deadline.C:
			t.Fatalf("%d attempts in 30s; the log: %s", n.Load(), w.String())
		}
	}
	stop()

	got := lines()
	if len(got) != 2 {
		t.Fatalf("%d lines for %d failed attempts with one line a minute and the clock moved once, want 2:\n%s", len(got), n.Load(), strings.Join(got, "\n"))
	}
	for i, want := range []string{"attempt=1 ", fmt.Sprintf("attempt=%d ", k+1)} {
		l := got[i]
		for _, part := range []string{"level=WARN", want, "url=" + r.srv.URL + "/in?REDACTED", `err="answered 503"`, "retry_in="} {
			if !strings.Contains(l, part) {
				t.Errorf("line %d lacks %q: %s", i+1, part, l)
			}
		}
	}
	if !strings.Contains(got[0], "suppressed=0 ") || !strings.Contains(got[1], fmt.Sprintf("suppressed=%d ", k-1)) {
		t.Errorf("the lines do not count the attempts not logged (0, then %d):\n%s", k-1, strings.Join(got, "\n"))
	}
	if out := w.String(); strings.Contains(out, "t0ken-s3cret") || strings.Contains(out, "token=") {
		t.Errorf("the log holds the receiver's token: %s", out)
	}
}
