package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"time"
)

// hostileReq is one bad request; every one must get an answer below 500
// and change nothing.
type hostileReq struct {
	method, path, body string
	hdr                map[string]string
}

// hostileCorpus is the bad input tried against every store: numbers in
// every refused notation, broken JSON, duplicate members, bad names, keys,
// durations, cursors, ids and headers.
func hostileCorpus() []hostileReq {
	const b = "/v1/limits/chaos-h/buckets/victim"
	var rs []hostileReq
	add := func(method, path, body string) { rs = append(rs, hostileReq{method: method, path: path, body: body}) }
	badNums := []string{`"1e2"`, `"+5"`, `".5"`, `"5."`, `" 1"`, `"1 "`, `"-1"`, `"-0"`, `"007"`, `"1.0000000"`,
		`"1000000000000.000001"`, `"10000000000000"`, `"NaN"`, `"Infinity"`, `"0x10"`, `"1_000"`, `""`, `null`, `true`,
		`[]`, `{}`, `1e2`, `-1`, `1e400`, `123456789012345678901234567890`, `"١٢٣"`, `"1\u0000"`}
	for _, n := range badNums {
		add("POST", b+"/fillup", `{"cost":`+n+`}`)
		add("POST", b+"/drain", `{"amount":`+n+`}`)
		add("POST", b+"/reservations", `{"amount":`+n+`,"ttl":"1m"}`)
		add("PUT", "/v1/limits/chaos-h", `{"capacity":`+n+`,"leak":{"amount":"1","per":"1h"}}`)
		add("POST", "/v1/fillup", `{"items":[{"limit":"chaos-h","key":"victim","cost":`+n+`}]}`)
	}
	for _, q := range []string{"1e2", "+5", "-1", "", "%zz", "1;2", "1&cost=2", strings.Repeat("9", 5000)} {
		add("GET", b+"?cost="+q, "")
	}
	for _, body := range []string{``, `{`, `[]`, `null`, `"x"`, `{"cost":"1"`, `{"cost":"1"}{"cost":"1"}`,
		`{"cost":"1","cost":"2"}`, `{"cost":"1","Cost":"4"}`, `{"cost":"1","extra":1}`,
		"{\"cost\":\"1\xff\"}", strings.Repeat("[", 100000), `{"cost":"1"}` + strings.Repeat(" ", 70000),
		`{"cost":` + strings.Repeat("9", 70000) + `}`} {
		add("POST", b+"/fillup", body)
	}
	for _, d := range []string{`"0s"`, `"1ns"`, `"1.5us"`, `"87601h"`, `"-1h"`, `"1d"`, `""`, `60`, `"9999999999h"`} {
		add("PUT", "/v1/limits/chaos-h", `{"capacity":"1","leak":{"amount":"1","per":`+d+`}}`)
		add("POST", b+"/reservations", `{"amount":"1","ttl":`+d+`}`)
	}
	for _, n := range []string{"UPPER", "-dash", strings.Repeat("a", 65), "a%2Fb", "%00", "a b", "%C3%A9"} {
		add("PUT", "/v1/limits/"+n, `{"capacity":"1","leak":{"amount":"1","per":"1h"}}`)
	}
	for _, k := range []string{"%00", "%7F", "%C2%85", "%FF", "%ED%A0%80", strings.Repeat("k", 257)} {
		add("POST", "/v1/limits/chaos-h/buckets/"+k+"/fillup", `{"cost":"1"}`)
	}
	for _, items := range []string{`[]`, `null`, `[{}]`, `[{"limit":"chaos-h","key":"\ud800","cost":"1"}]`,
		`[{"limit":"chaos-h","key":"victim","cost":"1"},{"limit":"nope","key":"x","cost":"1"}]`,
		"[" + strings.TrimSuffix(strings.Repeat(`{"limit":"chaos-h","key":"victim","cost":"1"},`, 65), ",") + "]"} {
		add("POST", "/v1/fillup", `{"items":`+items+`}`)
	}
	for _, c := range []string{"-300000000000000000.1", "1e99", "x", "9223372036854775807.9", "'; DROP TABLE limits; --",
		strings.Repeat("z", 5000), "-1", "0.-1"} {
		add("GET", b+"/history?cursor="+urlQuery(c), "")
		add("GET", "/v1/limits?cursor="+urlQuery(c), "")
	}
	for _, l := range []string{"0", "-1", "1001", "abc", "1e3", "99999999999999999999"} {
		add("GET", b+"/history?limit="+l, "")
		add("GET", "/v1/limits?limit="+l, "")
	}
	for _, id := range []string{"nope", strings.Repeat("h", 5000), "%00", "..%2F..%2Fetc"} {
		add("GET", "/v1/reservations/"+id, "")
		add("POST", "/v1/reservations/"+id+"/commit", `{"amount":"1"}`)
		add("POST", "/v1/reservations/"+id+"/release", ``)
	}
	rs = append(rs,
		hostileReq{method: "POST", path: b + "/fillup", body: `{"cost":"1"}`, hdr: map[string]string{"Idempotency-Key": strings.Repeat("i", 256)}},
		hostileReq{method: "POST", path: b + "/fillup", body: `{"cost":"1"}`, hdr: map[string]string{"X-Huge": strings.Repeat("h", 1<<20)}},
		hostileReq{method: "M123", path: b + "/fillup", body: `{"cost":"1"}`},
		hostileReq{method: "DELETE", path: b, body: ``},
	)
	return rs
}

func urlQuery(s string) string {
	r := strings.NewReplacer("%", "%25", "&", "%26", "#", "%23", " ", "%20", "+", "%2B", "'", "%27", ";", "%3B")
	return r.Replace(s)
}

// hostile sends the corpus and checks that nothing answered 5xx and that the
// victim bucket, its history and the limits are exactly as before.
func hostile(ctx context.Context, a *api) (row result, err error) {
	row.name = "hostile input"
	if err := a.putLimit(ctx, "chaos-h", "100", true); err != nil {
		return row, err
	}
	before := func() (any, error) {
		st, err := a.bucket(ctx, "chaos-h", "victim")
		if err != nil {
			return nil, err
		}
		h, err := a.history(ctx, "chaos-h", "victim")
		if err != nil {
			return nil, err
		}
		lim, err := limitDoc(ctx, a, "chaos-h")
		if err != nil {
			return nil, err
		}
		list, err := a.must(ctx, 200, "GET", "/v1/limits?limit=1000", "")
		if err != nil {
			return nil, err
		}
		return []any{st.Level.Round(3).String(), st.Held.String(), h, lim, string(list)}, nil
	}
	// A charge first, so that the bucket has a level and history to keep.
	if _, err := a.must(ctx, 200, "POST", "/v1/limits/chaos-h/buckets/victim/fillup", `{"cost":"10"}`); err != nil {
		return row, err
	}
	b0, err := before()
	if err != nil {
		return row, err
	}
	victim := func() string {
		// The limit leaks 1 per 87600h: a level rounded to 3 places and the
		// number of history entries change only when something was charged.
		st, _ := a.bucket(ctx, "chaos-h", "victim")
		h, _ := a.history(ctx, "chaos-h", "victim")
		return fmt.Sprintf("level %s, held %s, %d history entries", st.Level.Round(3), st.Held, len(h))
	}
	last := victim()
	for _, r := range hostileCorpus() {
		ans, err := a.do(ctx, r.method, r.path, r.body, r.hdr)
		row.calls++
		if now := victim(); now != last {
			row.fail("%s %s %s %.80v changed the bucket from %s to %s (answer %d)", r.method, clip(r.path), clip(r.body), r.hdr, last, now, ans.status)
			last = now
		}
		switch {
		case err != nil && r.hdr["X-Huge"] != "":
			// A server may close the connection on a 1 MB header.
		case err != nil:
			row.errors++
			row.fail("%s %s: %v", r.method, clip(r.path), err)
		case ans.status >= 500:
			row.errors++
			row.fail("%s %s %s: %d %s", r.method, clip(r.path), clip(r.body), ans.status, clampBody(ans.body))
		}
	}
	// Raw bytes net/http's client would not send.
	for _, raw := range []string{
		"POST /v1/limits/chaos-h/buckets/victim/fillup HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nTransfer-Encoding: chunked\r\n\r\n{\"cost\":\"1\"}",
		"GET /v1/limits/chaos-h/buckets/vic\x00tim HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/limits/chaos-h/buckets/victim/fillup HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
		"GET /v1/limits/chaos-h/buckets/%zz HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		row.calls++
		if st := rawStatus(a.base, raw); st >= 500 {
			row.errors++
			row.fail("raw request %q: %d", clip(raw), st)
		}
	}
	b1, err := before()
	if err != nil {
		return row, err
	}
	if !reflect.DeepEqual(b0, b1) {
		row.fail("state changed: before %.300v, after %.300v", b0, b1)
	}
	row.note = fmt.Sprintf("%d bad requests, %d answered 5xx or failed", row.calls, row.errors)
	return row, nil
}

// rawStatus writes raw to budgetd and returns the status of the answer (0
// when the connection closed without one).
func rawStatus(base, raw string) int {
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 2*time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
