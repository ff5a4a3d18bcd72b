package http_test

import (
	"strings"
	"testing"
)

// TestDuplicateMembers: every request body refuses a member given twice,
// compared case-insensitively as encoding/json matches names, at the top
// level and nested, with 400 invalid_request naming the field, and changes
// nothing.
func TestDuplicateMembers(t *testing.T) {
	a := newAPI(t)
	a.limit("l", "10", "1", "1h")
	hold := a.expect("POST", "/v1/limits/l/buckets/h/reservations", `{"amount":"1","ttl":"1m"}`, 201).str("id")
	bucket := "/v1/limits/l/buckets/k"
	cases := []struct {
		name, method, path, body, field string
	}{
		{"fillup", "POST", bucket + "/fillup", `{"cost":"1","Cost":"4"}`, "cost"},
		{"fillup same case", "POST", bucket + "/fillup", `{"cost":"1","cost":"4"}`, "cost"},
		{"fillup long s", "POST", bucket + "/fillup", `{"cost":"1","co\u017ft":"4"}`, "cost"},
		{"drain", "POST", bucket + "/drain", `{"amount":"1","AMOUNT":"2"}`, "amount"},
		{"multi top level", "POST", "/v1/fillup", `{"items":[{"limit":"l","key":"k","cost":"1"}],"Items":[]}`, "items"},
		{"multi item", "POST", "/v1/fillup", `{"items":[{"limit":"l","key":"a","cost":"1"},{"limit":"l","key":"k","cost":"1","cOST":"9"}]}`, "items[1].cost"},
		{"multi item key", "POST", "/v1/fillup", `{"items":[{"limit":"l","key":"a","Key":"k","cost":"1"}]}`, "items[0].key"},
		{"reserve", "POST", bucket + "/reservations", `{"amount":"1","ttl":"1m","TTL":"2m"}`, "ttl"},
		{"commit", "POST", "/v1/reservations/" + hold + "/commit", `{"amount":"1","overrun":false,"Overrun":true}`, "overrun"},
		{"release", "POST", "/v1/reservations/" + hold + "/release", `{"x":1,"X":2}`, "x"},
		{"limit", "PUT", "/v1/limits/l", `{"capacity":"10","Capacity":"1000","leak":{"amount":"1","per":"1h"}}`, "capacity"},
		{"limit leak", "PUT", "/v1/limits/l", `{"capacity":"10","leak":{"amount":"1","Amount":"1000","per":"1h"}}`, "leak.amount"},
		{"limit leak twice", "PUT", "/v1/limits/l", `{"capacity":"10","leak":{"amount":"1","per":"1h"},"LEAK":{"amount":"9","per":"1s"}}`, "leak"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := a.expect(tc.method, tc.path, tc.body, 400)
			if r.str("code") != "invalid_request" || r.str("field") != tc.field {
				t.Fatalf("code %q field %q, want invalid_request %q: %s", r.str("code"), r.str("field"), tc.field, r.raw)
			}
			if !strings.Contains(r.str("detail"), "twice") {
				t.Fatalf("detail does not say what is wrong: %s", r.raw)
			}
		})
	}
	// Nothing changed: the buckets are as before and the limit too.
	decEq(t, "level of k", a.expect("GET", bucket, "", 200).str("level"), "0")
	decEq(t, "level of a", a.expect("GET", "/v1/limits/l/buckets/a", "", 200).str("level"), "0")
	decEq(t, "held in h", a.expect("GET", "/v1/limits/l/buckets/h", "", 200).str("held"), "1")
	decEq(t, "capacity", a.expect("GET", "/v1/limits/l", "", 200).str("capacity"), "10")

	// Bodies whose names differ, also in nested objects that repeat a name
	// used elsewhere, are still accepted.
	a.expect("POST", "/v1/fillup", `{"items":[{"limit":"l","key":"a","cost":"1"},{"limit":"l","key":"k","cost":"2"}]}`, 200)
	a.expect("PUT", "/v1/limits/l", `{"capacity":"10","leak":{"amount":"1","per":"1h"},"history":true}`, 200)
	a.expect("POST", "/v1/reservations/"+hold+"/commit", `{"amount":"1","overrun":false}`, 200)
}
