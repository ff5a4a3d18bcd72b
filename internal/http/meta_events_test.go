package http_test

import (
	"encoding/json"
	"testing"
)

// TestMetaIdempotencyEveryRoute: on Reserve, Commit, Release and Drain the
// Idempotency-Key covers meta — the same body replays, another meta is 422
// idempotency_key_reused — and history shows each event once with the meta
// of its call, on every store and through the store wrapper budgetd serves.
func TestMetaIdempotencyEveryRoute(t *testing.T) {
	eachStore(t, func(t *testing.T, a *api) {
		a.expect("PUT", "/v1/limits/spend", `{"capacity":"5000.00","period":{"every":"month","tz":"Europe/Berlin"},"history":true}`, 200)
		b := "/v1/limits/spend/buckets/%7Bt%7Dteam"
		once := func(path, body, other string, status int, key string) response {
			t.Helper()
			first := a.expect("POST", path, body, status, "Idempotency-Key", key)
			again := a.expect("POST", path, body, status, "Idempotency-Key", key)
			if again.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("%s with the same body and key was not a replay: %s", path, again.raw)
			}
			if r := a.expect("POST", path, other, 422, "Idempotency-Key", key); r.str("code") != "idempotency_key_reused" {
				t.Errorf("%s with another meta under the same key: %s", path, r.raw)
			}
			return first
		}
		h1 := once(b+"/reservations", `{"amount":"5","ttl":"1m","meta":{"job":"a"}}`, `{"amount":"5","ttl":"1m","meta":{"job":"b"}}`, 201, "r1").str("id")
		once("/v1/reservations/"+h1+"/commit", `{"amount":"4","meta":{"rows":"4"}}`, `{"amount":"4","meta":{"rows":"5"}}`, 200, "c1")
		h2 := once(b+"/reservations", `{"amount":"6","ttl":"1m"}`, `{"amount":"6","ttl":"1m","meta":{"job":"c"}}`, 201, "r2").str("id")
		once("/v1/reservations/"+h2+"/release", `{"meta":{"why":"x"}}`, `{}`, 200, "l1")
		once(b+"/drain", `{"amount":"1","meta":{"reason":"refund"}}`, `{"amount":"1","meta":{"reason":"other"}}`, 200, "d1")

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
		want := []string{`drain {"reason":"refund"}`, `released {"why":"x"}`, `reserved null`, `committed {"rows":"4"}`, `reserved {"job":"a"}`}
		if len(hist.Items) != len(want) {
			t.Fatalf("history: %s", raw)
		}
		for i, it := range hist.Items {
			m, _ := json.Marshal(it.Meta)
			if got := it.Event + " " + string(m); got != want[i] {
				t.Errorf("entry %d = %s, want %s", i, got, want[i])
			}
		}
	})
}
