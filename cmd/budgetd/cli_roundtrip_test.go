package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	budgethttp "github.com/budgetd/budgetd/internal/http"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/budgetd/budgetd/internal/ledger/ledgertest"
	"github.com/budgetd/budgetd/internal/memory"
	"github.com/budgetd/budgetd/internal/mysql"
	"github.com/budgetd/budgetd/internal/postgres"
	"github.com/budgetd/budgetd/internal/redis"
	"github.com/budgetd/budgetd/internal/testenv"
)

// exchange is one answer budgetd sent, as it sent it.
type exchange struct {
	method, path string
	status       int
	body         []byte
}

// recorder serves h and keeps every answer it sends.
type recorder struct {
	h  http.Handler
	mu sync.Mutex
	ex []exchange
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, req)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
	r.mu.Lock()
	r.ex = append(r.ex, exchange{req.Method, req.URL.EscapedPath(), rec.Code, rec.Body.Bytes()})
	r.mu.Unlock()
}

// last is the last answer sent.
func (r *recorder) last(t *testing.T) exchange {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ex) == 0 {
		t.Fatal("budgetd answered nothing")
	}
	return r.ex[len(r.ex)-1]
}

// jsonValue decodes a document keeping numbers as they are written.
func jsonValue(t *testing.T, what string, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s is not one JSON document: %v\n%s", what, err, b)
	}
	if dec.More() {
		t.Fatalf("%s is more than one JSON document:\n%s", what, b)
	}
	return v
}

// diffJSON lists where got differs from want, member by member.
func diffJSON(at string, want, got any) []string {
	wm, wok := want.(map[string]any)
	gm, gok := got.(map[string]any)
	if wok && gok {
		var out []string
		for _, k := range slices.Sorted(maps.Keys(wm)) {
			g, ok := gm[k]
			if !ok {
				out = append(out, fmt.Sprintf("%s.%s: missing, budgetd answered %s", at, k, jsonText(wm[k])))
				continue
			}
			out = append(out, diffJSON(at+"."+k, wm[k], g)...)
		}
		for _, k := range slices.Sorted(maps.Keys(gm)) {
			if _, ok := wm[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: printed %s, budgetd did not answer it", at, k, jsonText(gm[k])))
			}
		}
		return out
	}
	wa, wok := want.([]any)
	ga, gok := got.([]any)
	if wok && gok && len(wa) == len(ga) {
		var out []string
		for i := range wa {
			out = append(out, diffJSON(fmt.Sprintf("%s[%d]", at, i), wa[i], ga[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(want, got) {
		return []string{fmt.Sprintf("%s: printed %s, budgetd answered %s", at, jsonText(got), jsonText(want))}
	}
	return nil
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCLIJSONIsTheServersAnswer sends every document the CLI prints with
// --json through server → client → CLI and demands that the CLI prints
// budgetd's answer member for member, value for value: a limit with
// thresholds, rollover and recorded denials; an override, a grant and
// rollover on the bucket (so that a member the CLI forgot shows as a
// default value, like the drain's "grants":"0" and "override":null of
// issue 43). On every store, each with its clock pinned.
func TestCLIJSONIsTheServersAnswer(t *testing.T) {
	type opener func(t *testing.T, now func() time.Time) (ledger.Store, func())
	ctx := context.Background()
	opened := func(t *testing.T, st interface{ Close() error }, err error) (ledger.Store, func()) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return st.(ledger.Store), func() { st.Close() }
	}
	// A server is looked up inside its subtest, so that one not configured
	// skips only its store (and fails under CI=true).
	stores := map[string]opener{
		"memory": func(t *testing.T, now func() time.Time) (ledger.Store, func()) {
			return memory.New(memory.WithClock(now)), func() {}
		},
		"postgres": func(t *testing.T, now func() time.Time) (ledger.Store, func()) {
			st, err := postgres.Open(ctx, storeURL(t, "BUDGETD_TEST_POSTGRES"), postgres.WithClock(now))
			return opened(t, st, err)
		},
		"mysql": func(t *testing.T, now func() time.Time) (ledger.Store, func()) {
			st, err := mysql.Open(ctx, testenv.MySQLDatabase(t), mysql.WithClock(now))
			return opened(t, st, err)
		},
	}
	for _, name := range []string{"redis", "redis-cluster"} {
		stores[name] = func(t *testing.T, now func() time.Time) (ledger.Store, func()) {
			st, err := redis.Open(ctx, redisURLs(t)[name], redis.WithClock(now))
			return opened(t, st, err)
		}
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			clock := ledgertest.NewClock()
			day := time.Now().UTC().Truncate(24 * time.Hour)
			clock.Set(day.Add(10 * time.Hour))
			store, closeStore := open(t, clock.Now)
			defer closeStore()
			cliRoundTrip(t, store, clock, name == "memory")
		})
	}
}

// cliRoundTrip is TestCLIJSONIsTheServersAnswer on one store; a store
// shared with other tests gets a limit name of its own and no limits list
// (which may span pages there).
func cliRoundTrip(t *testing.T, store ledger.Store, clock *ledgertest.Clock, alone bool) {
	rec := &recorder{h: budgethttp.New(ledger.NewService(store))}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	name := "team-spend"
	if !alone {
		name = fmt.Sprintf("team-spend-%d", time.Now().UnixNano())
	}

	// same runs a CLI command with --json and demands that it printed the
	// last answer budgetd sent to it, of the method and path given.
	same := func(wantCode int, method, path string, args ...string) map[string]any {
		t.Helper()
		var out bytes.Buffer
		err := run(t.Context(), append(args, "--json"), env(map[string]string{"BUDGETD_SERVER": srv.URL}), &out, &out)
		if code := exitCode(err); err != nil && code != wantCode || err == nil && wantCode != 0 {
			t.Fatalf("budgetd %s --json: %v (exit %d, want %d)\n%s", strings.Join(args, " "), err, code, wantCode, out.String())
		}
		ex := rec.last(t)
		if ex.method != method || ex.path != path {
			t.Fatalf("budgetd %s: the last call was %s %s, want %s %s", strings.Join(args, " "), ex.method, ex.path, method, path)
		}
		want := jsonValue(t, "budgetd's answer", ex.body)
		got := jsonValue(t, "the CLI's output", out.Bytes())
		if d := diffJSON("$", want, got); len(d) > 0 {
			t.Errorf("budgetd %s --json does not print budgetd's answer (HTTP %d):\n  %s\nbudgetd answered:\n%s\nthe CLI printed:\n%s",
				strings.Join(args, " "), ex.status, strings.Join(d, "\n  "), ex.body, out.String())
		}
		m, _ := want.(map[string]any)
		return m
	}
	// nonDefault demands that budgetd's bucket answer carries the grant,
	// the override and the rollover, so that they are checked.
	nonDefault := func(what string, doc map[string]any) {
		t.Helper()
		if doc["grants"] != "5" || doc["override"] != "vip" || doc["rollover"] == "0" || doc["rollover"] == nil {
			t.Fatalf("%s: budgetd answered grants %v, override %v, rollover %v; the test wants 5, vip and some rollover", what, doc["grants"], doc["override"], doc["rollover"])
		}
	}
	limit := "/v1/limits/" + name
	bucket := limit + "/buckets/vip"
	same(0, "PUT", limit, "limits", "put", name, "--capacity", "5000.00", "--period", "day", "--rollover-max", "1000",
		"--threshold", "80%", "--threshold", "4500", "--record-denials", "--mode", "soft", "--grace", "10%")
	same(0, "GET", limit, "limits", "get", name)
	same(0, "PUT", limit, "limits", "set", name, "--capacity", "5000")
	// The other kinds of limit document: a leak, and a window with its
	// precision (null members where a period has values).
	same(0, "PUT", limit+"-leak", "limits", "put", name+"-leak", "--capacity", "10", "--leak", "1/1s", "--mode", "shadow")
	same(0, "GET", limit+"-leak/buckets/a/can-accept", "check", name+"-leak", "a", "11")
	same(0, "PUT", limit+"-window", "limits", "put", name+"-window", "--capacity", "5", "--window", "1m", "--precision", "2s", "--history=false")
	same(0, "PUT", limit+"-window", "limits", "set", name+"-window", "--capacity", "6")
	same(0, "GET", limit+"-window", "limits", "get", name+"-window")
	if alone {
		same(0, "GET", "/v1/limits", "limits", "list")
	}
	until := clock.Now().Add(30 * 24 * time.Hour).Format(time.RFC3339)
	same(0, "PUT", limit+"/overrides/vip", "overrides", "put", name, "vip", "--capacity", "8000", "--expires-at", until)
	same(0, "GET", limit+"/overrides/vip", "overrides", "get", name, "vip")
	same(0, "GET", limit+"/overrides", "overrides", "list", name)
	// Over the 4500 threshold: an event to list.
	same(0, "POST", bucket+"/fillup", "fillup", name, "vip", "4600", "--meta", "order=A-1")

	// The next day the bucket has rollover; a grant tops it up.
	clock.Advance(24 * time.Hour)
	g := same(0, "POST", bucket+"/grants", "grants", "add", name, "vip", "5")
	grant, _ := g["grant"].(map[string]any)
	same(0, "GET", bucket+"/grants", "grants", "list", name, "vip")
	nonDefault("check", same(0, "GET", bucket, "check", name, "vip"))
	nonDefault("check COST", same(0, "GET", bucket+"/can-accept", "check", name, "vip", "10"))
	nonDefault("fillup", same(0, "POST", bucket+"/fillup", "fillup", name, "vip", "12.37", "--meta", "order=A-2"))
	nonDefault("drain", same(0, "POST", bucket+"/drain", "drain", name, "vip", "2", "--meta", "refund=R-1"))
	nonDefault("reserve", same(0, "POST", bucket+"/reservations", "reserve", name, "vip", "40", "--ttl", "10m"))
	nonDefault("reserve denied", same(3, "POST", bucket+"/reservations", "reserve", name, "vip", "100000"))
	nonDefault("fillup denied", same(3, "POST", bucket+"/fillup", "fillup", name, "vip", "100000"))
	holds := same(0, "GET", bucket+"/reservations", "holds", name, "vip")
	items, _ := holds["items"].([]any)
	if len(items) != 1 {
		t.Fatalf("holds: %v", holds)
	}
	id := items[0].(map[string]any)["id"].(string)
	r := same(0, "POST", "/v1/reservations/"+id+"/commit", "commit", id, "30")
	nonDefault("commit", r["bucket"].(map[string]any))
	hold, _ := same(0, "POST", bucket+"/reservations", "reserve", name, "vip", "1")["id"].(string)
	same(0, "POST", "/v1/reservations/"+hold+"/release", "release", hold)
	same(0, "GET", bucket+"/history", "history", name, "vip")
	if page := same(0, "GET", bucket+"/history", "history", name, "vip", "--limit", "2"); page["next_cursor"] == nil {
		t.Fatalf("history --limit 2: no next page to compare: %v", page)
	}
	same(0, "GET", "/v1/events", "events", "--limit", "1")
	if events := same(0, "GET", "/v1/events", "events"); alone && len(events["items"].([]any)) == 0 {
		t.Fatalf("no events to compare: %v", events)
	}
	same(0, "DELETE", bucket+"/grants/"+grant["id"].(string), "grants", "revoke", name, "vip", grant["id"].(string))
}
