package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestLimitsFileAtStart: budgetd --limits-file applies the file before it
// serves (the first request sees the limits), keeps the parsed file with
// its Envoy mapping, and a restart with the same file changes nothing.
func TestLimitsFileAtStart(t *testing.T) {
	file := writeFile(t, "limits.yaml", limitsYAML("boot"))
	server := startBudgetdArgs(t, "--limits-file", file)
	out, code := cliRun(t, server, "apply", "-f", file, "--dry-run")
	if code != 0 || !strings.Contains(out, "no changes (4 unchanged)") {
		t.Fatalf("after a start with the file, apply plans (exit %d):\n%s", code, out)
	}
	if out, _ := cliRun(t, server, "limits", "get", "spend-boot"); !strings.Contains(out, "Europe/Berlin") {
		t.Errorf("spend-boot:\n%s", out)
	}

	cfg, _, err := parseConfig([]string{"--limits-file", file}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemon(cfg, io.Discard, io.Discard)
	defer d.close()
	if err := d.readFiles(); err != nil {
		t.Fatal(err)
	}
	if d.limits == nil || len(d.limits.Envoy) != 1 || d.limits.Envoy[0].Descriptors[0].Limit != "rows-boot" {
		t.Errorf("the daemon keeps %+v, want the file with its envoy mapping", d.limits)
	}
	cfg, _, err = parseConfig(nil, env(map[string]string{"BUDGETD_LIMITS_FILE": file}), io.Discard)
	if err != nil || cfg.limitsFile != file {
		t.Errorf("BUDGETD_LIMITS_FILE: %q, %v", cfg.limitsFile, err)
	}
}

// TestLimitsFileBadStopsStart: a file that does not parse, or that cannot
// be applied, stops the start with the reason (line and field), before
// serving and before writing anything.
func TestLimitsFileBadStopsStart(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"syntax", "limits:\n  - name: a\n    capacity: [1\n", "line 3"},
		{"invalid value", "limits:\n  - name: a\n    capacity: 1\n    leak: {amount: 1, per: 1 hour}\n", "line 4: limits[0].leak.per"},
		{"unknown field", "limits:\n  - name: a\n    capacity: 1\n    leak: {amount: 1, per: 1s}\nlimitz: []\n", "line 5: limitz: unknown member"},
		{"override of no limit", "overrides:\n  - limit: nowhere\n    pattern: x\n    capacity: 1\n", "line 2: overrides[0].limit: no limit"},
		{"missing", "", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/nonexistent/limits.yaml"
			if tc.file != "" {
				path = writeFile(t, "limits.yaml", tc.file)
			}
			var stdout, stderr syncBuffer
			err := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--limits-file", path}, env(nil), &stdout, &stderr)
			if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "--limits-file") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v (exit %d), want exit 2 naming --limits-file and %q", err, exitCode(err), tc.want)
			}
			if strings.Contains(stdout.String(), "serving on") {
				t.Errorf("budgetd served with a bad limits file: %s", stdout.String())
			}
		})
	}
}

// TestLimitsFileConcurrentStarts: two budgetd instances starting at once
// on one new PostgreSQL schema with the same limits file both start (no
// error when the other created a limit first) and leave the file's state.
func TestLimitsFileConcurrentStarts(t *testing.T) {
	url := pgSchemaURL(t)
	file := writeFile(t, "limits.yaml", limitsYAML("twice"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var outs [2]syncBuffer
	dones := [2]chan error{make(chan error, 1), make(chan error, 1)}
	for i := range 2 {
		go func() {
			var stderr syncBuffer
			dones[i] <- run(ctx, []string{"--addr", "127.0.0.1:0", "--store", url, "--limits-file", file}, env(nil), &outs[i], &stderr)
		}()
	}
	servers := [2]string{waitURL(t, &outs[0], dones[0]), waitURL(t, &outs[1], dones[1])}
	for _, server := range servers {
		out, code := cliRun(t, server, "apply", "-f", file, "--dry-run", "--prune")
		if code != 0 || !strings.Contains(out, "no changes (4 unchanged)") {
			t.Errorf("after two starts, %s plans (exit %d):\n%s", server, code, out)
		}
	}
	cancel()
	for _, done := range dones {
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
}

// TestLimitsFileEnvoyMapping: the envoy member of --limits-file is the
// mapping of the gRPC listener: a descriptor it maps is charged to its
// limit and bucket (a cost above the capacity is over the limit), one it
// does not map is OK and unlimited.
func TestLimitsFileEnvoyMapping(t *testing.T) {
	file := writeFile(t, "limits.yaml", limitsYAML("grpc"))
	s := start(t, "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--limits-file", file)
	conn, err := grpc.NewClient(s.waitGRPC(t), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ask := func(key string, hits uint64) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: uint32(hits),
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: "t1"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := ask("tenant", 250001); r.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || r.Statuses[0].CurrentLimit.GetName() != "rows-grpc" {
		t.Errorf("a mapped descriptor above rows-grpc's capacity: %v", r)
	}
	if r := ask("tenant", 10); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetName() != "rows-grpc" {
		t.Errorf("a mapped descriptor within the capacity: %v", r)
	}
	// 250000 per hour leaks about 0.07 a millisecond, so the level read
	// depends on how busy the machine is; that the bucket was written, and
	// holds no more than the 10 charged, does not.
	out, _ := cliRun(t, s.url, "check", "rows-grpc", "t1", "--json")
	var b struct {
		Level     string
		UpdatedAt *string `json:"updated_at"`
	}
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.UpdatedAt == nil || decimal.RequireFromString(b.Level).GreaterThan(decimal.NewFromInt(10)) {
		t.Errorf("the charge is not on rows-grpc's bucket t1: %v\n%s", err, out)
	}
	if r := ask("user", 250001); r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("an unmapped descriptor: %v", r)
	}
}
