package main

import (
	"context"
	"fmt"
	"github.com/budgetd/budgetd/internal/testenv"
	"strings"
	"testing"
	"time"
)

// The README's CLI block, on every store budgetd serves: the monthly Berlin
// cap is created and listed with when it resets, charged with meta, a hold
// is captured with -q and committed, another released, a drain, and the
// history shows each event's meta.
func TestCLIOnEveryStore(t *testing.T) {
	stores := map[string]string{"memory": "memory", "postgres": storeURL(t, "BUDGETD_TEST_POSTGRES"), "mysql": testenv.MySQLDatabase(t)}
	for k, v := range redisURLs(t) {
		stores[k] = v
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var stdout, stderr syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--store", url}, env(nil), &stdout, &stderr)
			}()
			server := waitURL(t, &stdout, done)
			t.Cleanup(func() {
				cancel()
				<-done
			})
			expect := func(wantCode int, wantOut string, args ...string) string {
				t.Helper()
				out, code := cliRun(t, server, args...)
				if code != wantCode || !strings.Contains(out, wantOut) {
					t.Fatalf("budgetd %s: exit %d, want %d; output:\n%s\nwant it to contain %q", strings.Join(args, " "), code, wantCode, out, wantOut)
				}
				return out
			}
			limit := fmt.Sprintf("cli-%d", time.Now().UnixNano())
			berlin, _ := time.LoadLocation("Europe/Berlin")
			now := time.Now().In(berlin)
			next := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, berlin).UTC().Format(cliTime)
			expect(0, next, "limits", "put", limit, "--capacity", "5000.00", "--period", "month", "--tz", "Europe/Berlin")
			expect(0, next, "limits", "list")
			expect(0, next, "fillup", limit, "team-a", "12.37", "--meta", "order=A-1042")
			expect(3, "never fits", "check", limit, "team-a", "6000")
			hold := strings.TrimSpace(expect(0, "", "reserve", limit, "team-a", "80", "--ttl", "10m", "-q", "--meta", "job=nightly"))
			expect(0, "committed  61.2", "commit", hold, "61.20", "--meta", "rows=5000")
			hold = strings.TrimSpace(expect(0, "", "reserve", limit, "team-a", "1", "-q"))
			expect(0, "released", "release", hold, "--meta", "why=cancelled")
			expect(0, "5", "drain", limit, "team-a", "5", "--meta", "refund=R-7")
			out := expect(0, "order=A-1042", "history", limit, "team-a")
			for _, want := range []string{"job=nightly", "rows=5000", "why=cancelled", "refund=R-7"} {
				if !strings.Contains(out, want) {
					t.Errorf("history lacks the meta %s:\n%s", want, out)
				}
			}
			expect(0, "deleted", "limits", "delete", limit)
		})
	}
}
