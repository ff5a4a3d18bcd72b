package client_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/redis"
	"github.com/budgetd/budgetd/internal/storetest"
	"github.com/budgetd/budgetd/internal/testenv"
)

// callerMain is a program of another module: it uses the client and the
// middleware against the budgetd named by its first argument.
const callerMain = `package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/budgetd/budgetd/client"
	"github.com/budgetd/budgetd/client/middleware"
	"github.com/shopspring/decimal"
)

func main() {
	ctx := context.Background()
	bd, err := client.New(os.Args[1])
	if err != nil {
		panic(err)
	}
	d := decimal.RequireFromString
	if _, err := bd.PutLimit(ctx, "caller", client.LimitSpec{Capacity: d("2"), Leak: &client.Leak{Amount: d("1"), Per: time.Hour}}); err != nil {
		panic(err)
	}
	dec, err := bd.Fillup(ctx, "caller", "k", d("1.5"))
	fmt.Println("fillup", dec.Accepted, dec.Remaining, err)
	dec, err = bd.Fillup(ctx, "caller", "k", d("1"))
	fmt.Println("fillup", dec.Accepted, dec.RetryAfterDuration() > 0, err)
	hold, _, err := bd.Reserve(ctx, "caller", "h", d("1"), time.Minute)
	if err != nil {
		panic(err)
	}
	amt := d("0.25")
	res, err := bd.Commit(ctx, hold.ID, &amt, false)
	fmt.Println("commit", res.Reservation.State, res.Bucket.Level, err)

	limiter := middleware.New(bd, func(r *http.Request) ([]client.Item, error) {
		return []client.Item{{Limit: "caller", Key: "mw", Cost: d("1")}}, nil
	})
	h := limiter.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println("middleware", w.Code, w.Header().Get("Retry-After") != "")
	}
	fmt.Printf("counts %+v\n", limiter.Counts())
}
`

// TestExternalModule builds a module outside the repository that imports
// the client and the middleware (with a replace to this repository) and
// runs it against a real budgetd on every store the test environment has.
func TestExternalModule(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/caller\n\ngo 1.26\n\nrequire github.com/budgetd/budgetd v0.0.0\n\nreplace github.com/budgetd/budgetd => " + repo + "\n"
	for name, text := range map[string]string{"go.mod": gomod, "main.go": callerMain} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, gobin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	goCmd("mod", "tidy")
	goCmd("build", "-o", "caller", ".")

	want := strings.Join([]string{
		"fillup true 0.5 <nil>",
		"fillup false true <nil>",
		"commit committed 0.25 <nil>",
		"middleware 200 false",
		"middleware 200 false",
		"middleware 429 true",
		"counts {Allowed:2 Denied:1 FailedOpen:0 FailedClosed:0 BadRequest:0 CommitFailed:0}",
	}, "\n")
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			srv := httptest.NewServer(budgethttp.New(ledger.NewService(store)))
			defer srv.Close()
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "caller"), srv.URL)
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != want {
				t.Fatalf("%v; the caller printed:\n%s\nwant:\n%s", err, out, want)
			}
		})
	}
}

// stores opens an empty store of each kind the environment offers: memory
// always, and the PostgreSQL, MySQL, Redis and Redis Cluster that scripts/test
// starts (failing under CI=true when they are missing).
func stores(t *testing.T) map[string]func(t *testing.T) ledger.Store {
	out := map[string]func(t *testing.T) ledger.Store{
		"memory": func(t *testing.T) ledger.Store { return memory.New() },
	}
	env := func(t *testing.T, name string) string { return testenv.Server(t, name) }
	suffix := strings.ReplaceAll(strings.ToLower(t.Name()), "/", "_") + "_" + time.Now().Format("150405000000")
	out["postgres"] = func(t *testing.T) ledger.Store {
		url := env(t, "BUDGETD_TEST_POSTGRES")
		st, err := postgres.Open(context.Background(), url, postgres.WithSchema("budgetd_client_"+suffix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			st.Close()
			storetest.DropSchema(t, url, "budgetd_client_"+suffix)
		})
		return st
	}
	out["mysql"] = func(t *testing.T) ledger.Store {
		st, err := mysql.Open(context.Background(), testenv.MySQLDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	for _, name := range []string{"redis", "redis-cluster"} {
		out[name] = func(t *testing.T) ledger.Store {
			url := env(t, map[string]string{"redis": "BUDGETD_TEST_REDIS", "redis-cluster": "BUDGETD_TEST_REDIS_CLUSTER"}[name])
			if name == "redis-cluster" {
				url = "redis+cluster://" + url
			}
			st, err := redis.Open(context.Background(), url, redis.WithPrefix("client-"+suffix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
	}
	return out
}
