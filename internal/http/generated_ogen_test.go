package http_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/auth"
	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/memory"
)

// ogen is the second generator the tests run (through the Go module proxy,
// like oapiCodegen; neither is a dependency of budgetd).
const ogen = "github.com/ogen-go/ogen/cmd/ogen@v1.24.0"

// ogenMain uses an ogen client generated from openapi.json, with a bearer
// token: ogen decodes every answer into the operation's own result type
// and validates it against the document, so an answer off the contract is
// an error here.
const ogenMain = `package main

import (
	"context"
	"fmt"
	"os"

	"gentest/gen"
)

type token string

func (t token) Bearer(context.Context, gen.OperationName) (gen.Bearer, error) {
	return gen.Bearer{Token: string(t)}, nil
}

func main() {
	c, err := gen.NewClient(os.Args[1], token(os.Args[2]))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	put, err := c.PutLimit(ctx, &gen.LimitPut{Capacity: "10", Leak: gen.NewOptLeakPut(gen.LeakPut{Amount: "1", Per: "1h"})}, gen.PutLimitParams{Name: "generated"})
	if _, ok := put.(*gen.LimitHeaders); err != nil || !ok {
		panic(fmt.Sprintf("%v %#v", err, put))
	}
	monthly, err := c.PutLimit(ctx, &gen.LimitPut{Capacity: "5000.00", Period: gen.NewOptPeriodPut(gen.PeriodPut{Every: gen.PeriodPutEveryMonth, Tz: gen.NewOptString("Europe/Berlin")})}, gen.PutLimitParams{Name: "monthly"})
	m, ok := monthly.(*gen.LimitHeaders)
	if err != nil || !ok || m.Response.Period.Null {
		panic(fmt.Sprintf("%v %#v", err, monthly))
	}
	fmt.Printf("monthly every=%s tz=%s\n", m.Response.Period.Value.Every, m.Response.Period.Value.Tz)
	for i, cost := range []gen.AmountInput{"4", "7"} {
		res, err := c.Fillup(ctx, &gen.FillupRequest{Cost: cost}, gen.FillupParams{Name: "generated", Key: "a/b", IdempotencyKey: gen.NewOptString(fmt.Sprint("idem-", i))})
		if err != nil {
			panic(err)
		}
		switch r := res.(type) {
		case *gen.FillupOKHeaders:
			fmt.Printf("200 accepted=%v level=%s remaining=%s ratelimit=%s\n", r.Response.Accepted, r.Response.Level, r.Response.Remaining, r.RateLimit.Value)
		case *gen.FillupTooManyRequestsHeaders:
			fmt.Printf("429 accepted=%v retry_after=%v\n", r.Response.Accepted, !r.Response.RetryAfter.Null)
		default:
			panic(fmt.Sprintf("%#v", res))
		}
	}
	// CanAccept answers a decision and the state a bucket: each operation
	// has its own result type.
	can, err := c.CanAccept(ctx, gen.CanAcceptParams{Name: "generated", Key: "a/b", Cost: "7"})
	d, ok := can.(*gen.DecisionHeaders)
	if err != nil || !ok {
		panic(fmt.Sprintf("%v %#v", err, can))
	}
	state, err := c.GetBucket(ctx, gen.GetBucketParams{Name: "generated", Key: "a/b"})
	b, ok := state.(*gen.BucketStateHeaders)
	if err != nil || !ok {
		panic(fmt.Sprintf("%v %#v", err, state))
	}
	fmt.Printf("can-accept accepted=%v never_fits=%v retry_after=%v ratelimit=%v; state capacity=%s written=%v\n",
		d.Response.Accepted, d.Response.NeverFits, !d.Response.RetryAfter.Null, d.RateLimit.Set,
		b.Response.Capacity, !b.Response.UpdatedAt.Null)
	// A refusal is the problem type of its status.
	bad, err := c.CanAccept(ctx, gen.CanAcceptParams{Name: "nope", Key: "a/b", Cost: "1"})
	p, ok := bad.(*gen.LimitNotFoundHeaders)
	if err != nil || !ok {
		panic(fmt.Sprintf("%v %#v", err, bad))
	}
	fmt.Printf("404 code=%s\n", p.Response.Code)
}
`

// TestGeneratedOgenClient generates a Go client from openapi.json with ogen
// into a temporary module and drives a real budgetd (with access control
// on) with it: limits of both kinds, fillups, CanAccept and the bucket's
// state, a 404. It needs the Go toolchain and the module proxy.
func TestGeneratedOgenClient(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	dir := t.TempDir()
	for name, text := range map[string]string{
		"openapi.json": string(budgethttp.OpenAPI),
		"go.mod":       "module gentest\n\ngo 1.22\n",
		"main.go":      ogenMain,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	run := func(args ...string) string {
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
	run("run", ogen, "--target", "gen", "--package", "gen", "--clean", "openapi.json")
	run("mod", "tidy")

	const token = "bdg_ogen-admin"
	srv := httptest.NewServer(budgethttp.New(ledger.NewService(memory.New()),
		budgethttp.WithAuth(keysOf(t, auth.Line("ogen", token, auth.Admin, nil)))))
	defer srv.Close()
	out := run("run", ".", srv.URL, token)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || lines[0] != "monthly every=month tz=Europe/Berlin" ||
		!strings.HasPrefix(lines[1], `200 accepted=true level=4 remaining=6 ratelimit="generated";r=6;t=14400`) ||
		lines[2] != "429 accepted=false retry_after=true" ||
		lines[3] != "can-accept accepted=false never_fits=false retry_after=true ratelimit=true; state capacity=10 written=true" ||
		lines[4] != "404 code=limit_not_found" {
		t.Fatalf("the ogen client printed:\n%s", out)
	}
}
