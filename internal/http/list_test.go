package http_test

import (
	"encoding/json"
	"net/url"
	"slices"
	"sort"
	"testing"
	"time"
)

type bucketPage struct {
	Items []struct {
		Key       string  `json:"key"`
		Level     string  `json:"level"`
		Held      string  `json:"held"`
		Remaining string  `json:"remaining"`
		Capacity  string  `json:"capacity"`
		UpdatedAt *string `json:"updated_at"`
	} `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// TestListBuckets pages through a limit's buckets over the API: keys in
// byte order (with '/', non-ASCII and markup), each with the numbers GET
// …/buckets/{key} gives, and the errors of a bad limit, cursor or name.
func TestListBuckets(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("spend", "100", "1", "1s")
		a.limit("spend2", "100", "1", "1s")
		keys := []string{"tenant/b", "tenant/a", "Zed", "日本", "é", "<script>x</script>", "a b&c=d", "{t}1"}
		for i, k := range keys {
			a.expect("POST", "/v1/limits/spend/buckets/"+url.PathEscape(k)+"/fillup", `{"cost":"`+string(rune('1'+i))+`"}`, 200)
		}
		a.expect("POST", "/v1/limits/spend2/buckets/other/fillup", `{"cost":"1"}`, 200)
		a.expect("POST", "/v1/limits/spend/buckets/tenant%2Fa/reservations", `{"amount":"7"}`, 201)
		a.clock.Advance(500 * time.Millisecond)

		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			path := "/v1/limits/spend/buckets?limit=3"
			if cursor != "" {
				path += "&cursor=" + url.QueryEscape(cursor)
			}
			r := a.expect("GET", path, "", 200)
			var p bucketPage
			if err := json.Unmarshal([]byte(r.raw), &p); err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Items {
				got = append(got, it.Key)
				one := a.expect("GET", "/v1/limits/spend/buckets/"+url.PathEscape(it.Key), "", 200)
				if it.Level != one.str("level") || it.Held != one.str("held") || it.Remaining != one.str("remaining") ||
					it.Capacity != one.str("capacity") || it.UpdatedAt == nil || *it.UpdatedAt != one.str("updated_at") {
					t.Errorf("%q listed as %+v, GET says %s", it.Key, it, one.raw)
				}
			}
			if p.NextCursor == nil {
				break
			}
			if len(p.Items) != 3 || pages > 5 {
				t.Fatalf("page %d: %d items with a next cursor", pages, len(p.Items))
			}
			cursor = *p.NextCursor
		}
		want := slices.Clone(keys)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Fatalf("keys %q, want %q", got, want)
		}

		r := a.expect("GET", "/v1/limits/spend/buckets", "", 200)
		if r.body["next_cursor"] != nil {
			t.Errorf("one page has a next cursor: %s", r.raw)
		}
		a.expect("GET", "/v1/limits/none/buckets", "", 404)
		for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x", "?cursor=%%%", "?cursor=***", "?cursor=AA"} {
			p := a.expect("GET", "/v1/limits/spend/buckets"+q, "", 400)
			if p.str("field") == "" || p.str("code") != "invalid_request" {
				t.Errorf("%s: %s", q, p.raw)
			}
		}
		a.expect("GET", "/v1/limits/Bad!/buckets", "", 400)
	})
}

// TestListHolds lists a bucket's active holds as GET /v1/reservations/{id}
// shows each.
func TestListHolds(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.limit("spend", "100", "1", "1s")
		path := "/v1/limits/spend/buckets/team%2F%C3%A9"
		empty := a.expect("GET", path+"/reservations", "", 200)
		if empty.raw != "{\"items\":[]}\n" {
			t.Fatalf("no holds: %s", empty.raw)
		}
		h1 := a.expect("POST", path+"/reservations", `{"amount":"10","ttl":"1m"}`, 201).str("id")
		a.clock.Advance(time.Second)
		h2 := a.expect("POST", path+"/reservations", `{"amount":"5","ttl":"10s"}`, 201).str("id")
		h3 := a.expect("POST", path+"/reservations", `{"amount":"1"}`, 201).str("id")
		a.expect("POST", "/v1/reservations/"+h3+"/release", `{}`, 200)
		a.expect("POST", "/v1/limits/spend/buckets/other/reservations", `{"amount":"1"}`, 201)

		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		r := a.expect("GET", path+"/reservations", "", 200)
		if err := json.Unmarshal([]byte(r.raw), &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 2 {
			t.Fatalf("holds: %s", r.raw)
		}
		for i, id := range []string{h1, h2} {
			one := a.expect("GET", "/v1/reservations/"+id, "", 200).raw
			if string(list.Items[i])+"\n" != one {
				t.Errorf("hold %d listed as %s, GET says %s", i, list.Items[i], one)
			}
		}
		a.clock.Advance(10 * time.Second) // h2 expires
		r = a.expect("GET", path+"/reservations", "", 200)
		if err := json.Unmarshal([]byte(r.raw), &list); err != nil || len(list.Items) != 1 {
			t.Fatalf("after h2 expired: %s", r.raw)
		}
		a.expect("GET", "/v1/limits/none/buckets/k/reservations", "", 404)
		a.expect("GET", "/v1/limits/spend/buckets/%C3%28/reservations", "", 400)
	})
}
