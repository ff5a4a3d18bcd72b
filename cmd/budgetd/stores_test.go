package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/testenv"
)

// storeURL returns the test server URL in env, skipping locally when unset
// and failing in CI.
func storeURL(t *testing.T, env string) string {
	t.Helper()
	return testenv.Server(t, env)
}

func redisURLs(t *testing.T) map[string]string {
	return map[string]string{
		"redis":         storeURL(t, "BUDGETD_TEST_REDIS"),
		"redis-cluster": "redis+cluster://" + storeURL(t, "BUDGETD_TEST_REDIS_CLUSTER"),
	}
}

// TestRunWithStores serves the API from each real store through run():
// a limit, two accepted fillups and a 429, then a clean stop. MySQL runs
// with its decision cache on (the default) and off (--mysql-cache 0), and
// the start-up line says which.
func TestRunWithStores(t *testing.T) {
	stores := map[string]string{"postgres": storeURL(t, "BUDGETD_TEST_POSTGRES"), "mysql": testenv.MySQLDatabase(t), "mysql-nocache": testenv.MySQLDatabase(t)}
	for k, v := range redisURLs(t) {
		stores[k] = v
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stdout, stderr syncBuffer
			done := make(chan error, 1)
			go func() {
				args := []string{"--addr", "127.0.0.1:0", "--store", url}
				if name == "mysql-nocache" {
					args = append(args, "--mysql-cache", "0")
				}
				done <- run(ctx, args, env(nil), &stdout, &stderr)
			}()
			base := waitURL(t, &stdout, done)
			if !strings.Contains(stdout.String(), strings.SplitN(name, "-", 2)[0]+" store") {
				t.Fatalf("start-up line does not name the store: %q", stdout.String())
			}
			if cache := map[string]string{"mysql": fmt.Sprintf("decision cache of %d,", mysql.DefaultCacheEntries), "mysql-nocache": "decision cache off,"}[name]; !strings.Contains(stdout.String(), cache) {
				t.Fatalf("start-up line does not say %q: %q", cache, stdout.String())
			}
			limit := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
			req, _ := http.NewRequest("PUT", base+"/v1/limits/"+limit, strings.NewReader(`{"capacity":"2","leak":{"amount":"1","per":"1h"}}`))
			if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
				t.Fatalf("PUT limit: %v %v", res, err)
			}
			var codes []int
			for i := 0; i < 3; i++ {
				res, err := http.Post(base+"/v1/limits/"+limit+"/buckets/k/fillup", "application/json", strings.NewReader(`{"cost":"1"}`))
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				codes = append(codes, res.StatusCode)
			}
			if fmt.Sprint(codes) != "[200 200 429]" {
				t.Fatalf("fillups answered %v", codes)
			}
			if res, err := http.Get(base + "/readyz"); err != nil || res.StatusCode != 200 {
				t.Fatalf("/readyz: %v %v", res, err)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("run: %v\n%s", err, stderr.String())
			}
		})
	}
}

func TestMigrateCommand(t *testing.T) {
	for _, url := range []string{storeURL(t, "BUDGETD_TEST_POSTGRES"), testenv.MySQLDatabase(t)} {
		var out strings.Builder
		if err := run(context.Background(), []string{"--store", url, "migrate"}, env(nil), &out, io.Discard); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		if !strings.Contains(out.String(), "applied") {
			t.Fatalf("migrate said %q", out.String())
		}
	}
	if err := run(context.Background(), []string{"migrate"}, env(nil), io.Discard, io.Discard); exitCode(err) != 2 {
		t.Fatalf("migrate on memory: %v", err)
	}
}

// startBinary starts a built budgetd and returns its base URL.
func startBinary(t *testing.T, bin string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, _ := cmd.StdoutPipe()
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !servingRE.MatchString(lines.Text()) {
		t.Fatalf("start-up line %q, stderr %q", lines.Text(), stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	return cmd, servingRE.FindStringSubmatch(lines.Text())[1]
}

// TestDurabilityKill9 kills budgetd with SIGKILL while 32 clients charge one
// bucket on each durable store: after a restart every fillup that was
// answered 200 is in the level and the history, and nothing more than was
// sent.
func TestDurabilityKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	stores := map[string]string{"postgres": storeURL(t, "BUDGETD_TEST_POSTGRES"), "mysql": testenv.MySQLDatabase(t)}
	for k, v := range redisURLs(t) {
		stores[k] = v
	}
	bin := filepath.Join(t.TempDir(), "budgetd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for name, url := range stores {
		t.Run(name, func(t *testing.T) {
			cmd, base := startBinary(t, bin, "--addr", "127.0.0.1:0", "--store", url)
			limit := fmt.Sprintf("kill9-%d", time.Now().UnixNano())
			// The leak over the test is far below 10^-12: the level counts fillups exactly.
			req, _ := http.NewRequest("PUT", base+"/v1/limits/"+limit, strings.NewReader(`{"capacity":"1000000000000","leak":{"amount":"0.000001","per":"87600h"}}`))
			if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
				t.Fatalf("PUT limit: %v %v", res, err)
			}
			var acked, sent atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			client := &http.Client{Timeout: 5 * time.Second}
			for w := 0; w < 32; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						sent.Add(1)
						res, err := client.Post(base+"/v1/limits/"+limit+"/buckets/k/fillup", "application/json", strings.NewReader(`{"cost":"1"}`))
						if err != nil {
							return // the server is gone
						}
						io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if res.StatusCode == 200 {
							acked.Add(1)
						}
					}
				}()
			}
			deadline := time.Now().Add(10 * time.Second)
			for acked.Load() < 300 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			close(stop)
			wg.Wait()
			_ = cmd.Wait()
			if acked.Load() == 0 {
				t.Fatal("no fillup was acknowledged before the kill")
			}

			_, base = startBinary(t, bin, "--addr", "127.0.0.1:0", "--store", url)
			res, err := http.Get(base + "/v1/limits/" + limit + "/buckets/k")
			if err != nil {
				t.Fatal(err)
			}
			var st struct{ Level string }
			json.NewDecoder(res.Body).Decode(&st)
			res.Body.Close()
			level := decimal.RequireFromString(st.Level)
			if level.LessThan(decimal.NewFromInt(acked.Load())) || level.GreaterThan(decimal.NewFromInt(sent.Load())) {
				t.Fatalf("level %s after kill -9: acknowledged %d, sent %d", level, acked.Load(), sent.Load())
			}
			entries := 0
			cursor := ""
			for {
				res, err := http.Get(base + "/v1/limits/" + limit + "/buckets/k/history?limit=1000" + cursor)
				if err != nil {
					t.Fatal(err)
				}
				var page struct {
					Items      []json.RawMessage
					NextCursor *string `json:"next_cursor"`
				}
				json.NewDecoder(res.Body).Decode(&page)
				res.Body.Close()
				entries += len(page.Items)
				if page.NextCursor == nil {
					break
				}
				cursor = "&cursor=" + *page.NextCursor
			}
			if !decimal.NewFromInt(int64(entries)).Equal(level) {
				t.Fatalf("history has %d fillups, level is %s", entries, level)
			}
			t.Logf("%s: %d acknowledged, %d sent, level %s after kill -9 and restart", name, acked.Load(), sent.Load(), level)
		})
	}
}
