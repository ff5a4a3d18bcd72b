package http_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestMeta: meta given on each kind of call comes back in history exactly,
// is covered by the Idempotency-Key (another meta is a reused key, the same
// meta in another key order a replay), and bad meta is a 400 naming the
// field that charges nothing — on every store.
func TestMeta(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.expect("PUT", "/v1/limits/spend", `{"capacity":"100","leak":{"amount":"1","per":"1h"},"history":true}`, 200)
		b := "/v1/limits/spend/buckets/%7Bt%7Dteam" // {t}: one hash slot for Redis Cluster
		a.expect("POST", b+"/fillup", `{"cost":"1","meta":{"order":"A-1","user":"<script>alert(1)</script>"}}`, 200)
		a.expect("POST", "/v1/fillup", `{"items":[{"limit":"spend","key":"{t}team","cost":"2","meta":{"item":"0"}},{"limit":"spend","key":"{t}other","cost":"1"}]}`, 200)
		hold := a.expect("POST", b+"/reservations", `{"amount":"5","ttl":"1m","meta":{"job":"import-7"}}`, 201).str("id")
		a.expect("POST", "/v1/reservations/"+hold+"/commit", `{"amount":"4","meta":{"rows":"4000"}}`, 200)
		hold2 := a.expect("POST", b+"/reservations", `{"amount":"1","ttl":"1m"}`, 201).str("id")
		a.expect("POST", "/v1/reservations/"+hold2+"/release", `{"meta":{"why":"cancelled"}}`, 200)
		a.expect("POST", b+"/drain", `{"amount":"0.5","meta":{"reason":"refund"}}`, 200)

		var hist struct {
			Items []struct {
				Event string            `json:"event"`
				Meta  map[string]string `json:"meta"`
			} `json:"items"`
		}
		raw := a.expect("GET", b+"/history", "", 200).raw
		if err := json.Unmarshal([]byte(raw), &hist); err != nil {
			t.Fatal(err)
		}
		want := []string{
			`drain {"reason":"refund"}`, `released {"why":"cancelled"}`, `reserved null`, `committed {"rows":"4000"}`,
			`reserved {"job":"import-7"}`, `fillup {"item":"0"}`, `fillup {"order":"A-1","user":"\u003cscript\u003ealert(1)\u003c/script\u003e"}`,
		}
		if len(hist.Items) != len(want) {
			t.Fatalf("history: %s", raw)
		}
		for i, it := range hist.Items {
			m, _ := json.Marshal(it.Meta)
			if got := it.Event + " " + string(m); got != want[i] {
				t.Errorf("entry %d = %s, want %s", i, got, want[i])
			}
		}
		if strings.Contains(raw, `"reserved","amount":"1","reservation_id":"`+hold2+`","meta"`) {
			t.Errorf("an entry without meta shows a meta member: %s", raw)
		}

		// The Idempotency-Key covers meta; key order does not matter.
		before := a.bucketState(b)
		first := a.expect("POST", b+"/fillup", `{"cost":"1","meta":{"a":"1","b":"2"}}`, 200, "Idempotency-Key", "m1")
		again := a.expect("POST", b+"/fillup", `{"meta":{"b":"2","a":"1"},"cost":"1"}`, 200, "Idempotency-Key", "m1")
		if again.header.Get("Idempotent-Replayed") != "true" || again.raw != first.raw {
			t.Errorf("same meta in another order was not a replay: %s", again.raw)
		}
		for _, body := range []string{`{"cost":"1","meta":{"a":"1","b":"3"}}`, `{"cost":"1"}`, `{"cost":"1","meta":{"a":"1"}}`} {
			if r := a.expect("POST", b+"/fillup", body, 422, "Idempotency-Key", "m1"); r.str("code") != "idempotency_key_reused" {
				t.Errorf("%s with a used key: %s", body, r.raw)
			}
		}
		multi := `{"items":[{"limit":"spend","key":"{t}team","cost":"1","meta":{"k":"v"}}]}`
		a.expect("POST", "/v1/fillup", multi, 200, "Idempotency-Key", "m2")
		if r := a.expect("POST", "/v1/fillup", strings.Replace(multi, `"v"`, `"w"`, 1), 422, "Idempotency-Key", "m2"); r.str("code") != "idempotency_key_reused" {
			t.Errorf("multi-bucket call with another meta: %s", r.raw)
		}
		a.expect("POST", b+"/drain", `{"amount":"2"}`, 200) // back to where it was
		decEq(t, "level", jsonField(t, a.bucketState(b), "level"), jsonField(t, before, "level"))

		// Bad meta: 400 naming the field, nothing charged.
		level := jsonField(t, a.bucketState(b), "level")
		seventeen := make([]string, 17)
		for i := range seventeen {
			seventeen[i] = `"k` + string(rune('a'+i)) + `":"v"`
		}
		bad := []struct{ meta, field string }{
			{"{" + strings.Join(seventeen, ",") + "}", "meta"},
			{`{"` + strings.Repeat("k", 65) + `":"v"}`, "meta"},
			{`{"Order":"v"}`, "meta"},
			{`{"k":"` + strings.Repeat("v", 257) + `"}`, "meta.k"},
			{`{"k":1}`, "meta.k"},
			{`{"k":null}`, "meta.k"},
			{`{"k":{"x":"y"}}`, "meta.k"},
			{`{"k":"\ud800"}`, "meta.k"},
			{"{\"k\":\"\xff\"}", "meta.k"},
			{`"order"`, "meta"},
			{`["a"]`, "meta"},
			{`{"k":"v","k":"w"}`, "meta.k"},
			{`{"a` + strings.Repeat("x", 60) + `":"` + strings.Repeat("y", 256) + `","b` + strings.Repeat("x", 60) + `":"` + strings.Repeat("y", 256) + `","c` + strings.Repeat("x", 60) + `":"` + strings.Repeat("y", 256) + `","d` + strings.Repeat("x", 60) + `":"` + strings.Repeat("y", 256) + `","e` + strings.Repeat("x", 60) + `":"` + strings.Repeat("y", 256) + `","f` + strings.Repeat("x", 60) + `":"` + strings.Repeat("y", 256) + `","g` + strings.Repeat("x", 60) + `":"` + strings.Repeat("y", 256) + `"}`, "meta"},
		}
		for _, tc := range bad {
			for _, call := range []struct{ path, body, field string }{
				{b + "/fillup", `{"cost":"1","meta":` + tc.meta + `}`, tc.field},
				{"/v1/fillup", `{"items":[{"limit":"spend","key":"{t}other","cost":"1"},{"limit":"spend","key":"{t}team","cost":"1","meta":` + tc.meta + `}]}`, "items[1]." + tc.field},
				{b + "/reservations", `{"amount":"1","meta":` + tc.meta + `}`, tc.field},
				{b + "/drain", `{"amount":"1","meta":` + tc.meta + `}`, tc.field},
				{"/v1/reservations/" + hold + "/commit", `{"meta":` + tc.meta + `}`, tc.field},
			} {
				r := a.expect("POST", call.path, call.body, 400)
				if r.str("code") != "invalid_request" || r.str("field") != call.field {
					t.Errorf("%s %.80s: %s, want invalid_request naming %s", call.path, call.body, r.raw, call.field)
				}
			}
		}
		if got := jsonField(t, a.bucketState(b), "level"); got != level {
			t.Errorf("bad meta changed the level: %s, was %s", got, level)
		}
		if held := jsonField(t, a.bucketState(b), "held"); held != "0" {
			t.Errorf("bad meta left a hold: held %s", held)
		}
	})
}

func jsonField(t *testing.T, raw, field string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	s, _ := m[field].(string)
	return s
}
