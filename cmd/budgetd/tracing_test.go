package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/tracing/otlptest"
)

// tracedRun runs budgetd with env, sends a PUT and a fillup that carries
// the caller's traceparent, stops it and returns its stderr.
func tracedRun(t *testing.T, vars map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0"}, env(vars), &stdout, &stderr)
	}()
	url := waitURL(t, &stdout, done)
	send := func(method, path, body string) int {
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Header.Set("Traceparent", "00-"+e2eTrace+"-"+e2eSpan+"-01")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := send("PUT", "/v1/limits/e2e", `{"capacity":"2","leak":{"amount":"1","per":"1h"}}`); code != 200 {
		t.Fatalf("PUT limit %d", code)
	}
	if code := send("POST", "/v1/limits/e2e/buckets/user-42/fillup", `{"cost":"1"}`); code != 200 {
		t.Fatalf("fillup %d", code)
	}
	stopRun(t, cancel, done)
	return stderr.String()
}

const (
	e2eTrace = "0af7651916cd43dd8448eb211c80319c"
	e2eSpan  = "b7ad6b7169203331"
)

func TestRunSendsTraces(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	t.Setenv("OTEL_SERVICE_NAME", "budgetd-e2e") // read by the SDK from the process
	log := tracedRun(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL})
	// run has returned: the spans were sent on the way out.
	spans := recv.Spans()
	server := otlptest.Named(spans, "POST /v1/limits/{name}/buckets/{key}/fillup")
	if len(server) != 1 {
		t.Fatalf("%d fillup server spans in %d spans", len(server), len(spans))
	}
	if got := otlptest.ID(server[0].TraceId); got != e2eTrace {
		t.Errorf("trace %s, want the caller's %s", got, e2eTrace)
	}
	for _, name := range []string{"ledger.fillup", "store.fillup"} {
		if n := len(otlptest.Named(spans, name)); n != 1 {
			t.Errorf("%d spans %s, want 1", n, name)
		}
	}
	found := false
	for _, kv := range recv.Resources() {
		found = found || kv == "service.name=budgetd-e2e"
	}
	if !found {
		t.Errorf("OTEL_SERVICE_NAME not honoured: resource %q", recv.Resources())
	}
	if !strings.Contains(log, "tracing: spans are sent over OTLP/HTTP") {
		t.Errorf("no start-up line about tracing in %q", log)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "route=/v1/limits/:name/buckets/:key/fillup") && !strings.Contains(line, "trace_id="+e2eTrace) {
			t.Errorf("access-log line without the trace id: %q", line)
		}
		if strings.Contains(line, "user-42") {
			t.Errorf("the bucket key in the log without --log-keys: %q", line)
		}
	}
}

func TestRunTracingOff(t *testing.T) {
	recv := otlptest.NewReceiver(t)
	for name, vars := range map[string]map[string]string{
		"no variable":    {},
		"exporter none":  {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL},
		"SDK disabled":   {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL},
		"unrelated OTEL": {"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"},
		"propagators":    {"OTEL_PROPAGATORS": "b3"}, // not read when off
	} {
		t.Run(name, func(t *testing.T) {
			log := tracedRun(t, vars)
			if strings.Contains(log, "tracing:") {
				t.Errorf("tracing started: %q", log)
			}
			if strings.Contains(log, "trace_id=") {
				t.Errorf("a trace id in the log with tracing off: %q", log)
			}
			if !strings.Contains(log, "route=/v1/limits/:name/buckets/:key/fillup") {
				t.Errorf("no access-log line of the fillup in %q", log)
			}
		})
	}
	if n := recv.Posts(); n != 0 {
		t.Fatalf("%d exports with tracing off", n)
	}
}

func TestRunRefusesOtelItCannotHonour(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want string // the variable, and the value when named
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, `OTEL_TRACES_EXPORTER must be otlp or none, not "zipkin"`},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_PROPAGATORS": "tracecontext,b3"},
			`OTEL_PROPAGATORS may list tracecontext and baggage, or be none, not "b3"`},
	} {
		err := run(context.Background(), []string{"--addr", "127.0.0.1:0"}, env(tc.vars), &syncBuffer{}, &syncBuffer{})
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: run returned %v, want a usage error with %q", tc.vars, err, tc.want)
		}
	}
}
