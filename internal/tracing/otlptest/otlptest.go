// Package otlptest is an OTLP/HTTP trace receiver for tests: an httptest
// server that accepts POST /v1/traces (a protobuf
// ExportTraceServiceRequest, gzipped or not), as a collector would, and
// keeps the spans it was sent for the test to look at.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is a running receiver; Close it, or let the test's cleanup.
type Receiver struct {
	*httptest.Server
	mu        sync.Mutex
	spans     []*tracepb.Span
	resources []string
	posts     int
}

// NewReceiver starts a receiver, closed when t ends.
func NewReceiver(t testing.TB) *Receiver {
	r := &Receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

// Endpoint is the URL to send traces to.
func (r *Receiver) Endpoint() string { return r.URL + "/v1/traces" }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "POST /v1/traces only", http.StatusNotFound)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "Content-Type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.posts++
	for _, rs := range msg.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.resources = append(r.resources, resourceAttrs(msg.ResourceSpans)...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// Posts is how many exports were received.
func (r *Receiver) Posts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

// Resources returns the resource attributes of every export received, as
// key=value strings.
func (r *Receiver) Resources() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.resources...)
}

func resourceAttrs(rss []*tracepb.ResourceSpans) []string {
	var out []string
	for _, rs := range rss {
		for _, kv := range rs.GetResource().GetAttributes() {
			out = append(out, kv.Key+"="+kv.GetValue().GetStringValue())
		}
	}
	return out
}

// Named returns the spans named name.
func Named(spans []*tracepb.Span, name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Attr returns the string form of span's attribute key, and whether it
// is there.
func Attr(span *tracepb.Span, key string) (string, bool) {
	for _, kv := range span.Attributes {
		if kv.Key == key {
			v := kv.GetValue()
			if s, ok := v.GetValue().(*commonpb.AnyValue_StringValue); ok {
				return s.StringValue, true
			}
			if i, ok := v.GetValue().(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(i.IntValue, 10), true
			}
			return v.String(), true
		}
	}
	return "", false
}

// ID is a trace or span id as hex, as traceparent writes it.
func ID(b []byte) string { return hex.EncodeToString(b) }
