package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// api calls one budgetd.
type api struct {
	base string
	c    *http.Client
}

func newAPI(base string, conns int) *api {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
	}
	return &api{base: base, c: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// answer is one HTTP exchange.
type answer struct {
	status int
	body   []byte
	header http.Header
	took   time.Duration
}

func (a *api) do(ctx context.Context, method, path, body string, hdr map[string]string) (answer, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		return answer{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := a.c.Do(req)
	if err != nil {
		return answer{took: time.Since(start)}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: b, header: resp.Header, took: time.Since(start)}, err
}

// must is do for set-up and read-back calls that have to succeed with
// want. A 503 to an idempotent one (GET, PUT, DELETE) — a store still
// recovering from the fault just injected, or slow on a busy machine — is
// retried for up to 30 s, as a client would; a POST is sent once.
func (a *api) must(ctx context.Context, want int, method, path, body string) ([]byte, error) {
	deadline := time.Now().Add(30 * time.Second)
	wait := 50 * time.Millisecond
	ans, err := a.do(ctx, method, path, body, nil)
	for err == nil && ans.status == http.StatusServiceUnavailable && want != http.StatusServiceUnavailable &&
		method != http.MethodPost && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
		ans, err = a.do(ctx, method, path, body, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if ans.status != want {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, ans.status, ans.body)
	}
	return ans.body, nil
}

func (a *api) putLimit(ctx context.Context, name, capacity string, history bool) error {
	if _, err := a.do(ctx, http.MethodDelete, "/v1/limits/"+name, "", nil); err != nil {
		return err
	}
	_, err := a.must(ctx, 200, http.MethodPut, "/v1/limits/"+name,
		fmt.Sprintf(`{"capacity":%q,"leak":{"amount":"1","per":"87600h"},"history":%t}`, capacity, history))
	return err
}

// bucketState is GET …/buckets/{key}.
type bucketState struct {
	Level decimal.Decimal `json:"level"`
	Held  decimal.Decimal `json:"held"`
}

func (a *api) bucket(ctx context.Context, limit, key string) (bucketState, error) {
	var s bucketState
	b, err := a.must(ctx, 200, http.MethodGet, "/v1/limits/"+limit+"/buckets/"+url.PathEscape(key), "")
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// historyEntry is one entry of a bucket's history.
type historyEntry struct {
	ID     string          `json:"id"`
	Time   string          `json:"time"`
	Event  string          `json:"event"`
	Amount decimal.Decimal `json:"amount"`
}

func (a *api) history(ctx context.Context, limit, key string) ([]historyEntry, error) {
	var all []historyEntry
	cursor := ""
	for {
		p := "/v1/limits/" + limit + "/buckets/" + url.PathEscape(key) + "/history?limit=1000"
		if cursor != "" {
			p += "&cursor=" + url.QueryEscape(cursor)
		}
		b, err := a.must(ctx, 200, http.MethodGet, p, "")
		if err != nil {
			return nil, err
		}
		var page struct {
			Items      []historyEntry `json:"items"`
			NextCursor *string        `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil || *page.NextCursor == "" {
			return all, nil
		}
		cursor = *page.NextCursor
	}
}

func newKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// decision is the part of a decision body the checks read.
type decision struct {
	Accepted bool `json:"accepted"`
}

func accepted(body []byte) bool {
	var d decision
	return json.Unmarshal(body, &d) == nil && d.Accepted
}

func clampBody(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
