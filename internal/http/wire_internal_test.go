package http

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/bucket"
	"github.com/budgetd/budgetd/internal/ledger"
	"github.com/shopspring/decimal"
)

// wireField is one member of a type's JSON form.
type wireField struct {
	typ       reflect.Type
	omitempty bool
}

// wireFields lists the JSON members of struct type t, embedded structs
// flattened as encoding/json does.
func wireFields(t reflect.Type) map[string]wireField {
	out := map[string]wireField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			for k, v := range wireFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		out[name] = wireField{f.Type, strings.Contains(opts, "omitempty")}
	}
	return out
}

// wireKind is the JSON type a Go type is written as; a struct is "object".
func wireKind(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[decimal.Decimal](), reflect.TypeFor[api.Time](), reflect.TypeFor[api.Duration](), reflect.TypeFor[api.Percent](),
		reflect.TypeFor[jsonAmount](), reflect.TypeFor[jsonDuration](), reflect.TypeFor[jsonText]():
		return "string"
	case reflect.TypeFor[jsonMeta](), reflect.TypeFor[api.Meta](), reflect.TypeFor[map[string]string]():
		return "meta"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int:
		return "integer"
	case reflect.Slice:
		return "array"
	case reflect.Struct:
		return "object"
	}
	return t.Kind().String()
}

// sameWire checks that the server's type srv and the api type pub have the
// same JSON members, each of the same JSON type, both null-able or neither,
// both omitted when empty or neither; nested objects and arrays of objects
// are compared in turn. Request bodies (request) are read, not written:
// there only names and types are compared, since the server reads an absent
// member as its default.
func sameWire(t *testing.T, path string, srv, pub reflect.Type, request bool) {
	t.Helper()
	sf, pf := wireFields(srv), wireFields(pub)
	for name, s := range sf {
		at := path + "." + name
		p, ok := pf[name]
		if !ok {
			t.Errorf("%s: the server has it, package api does not", at)
			continue
		}
		st, pt := s.typ, p.typ
		sp, pp := st.Kind() == reflect.Pointer, pt.Kind() == reflect.Pointer
		if sp {
			st = st.Elem()
		}
		if pp {
			pt = pt.Elem()
		}
		if wireKind(st) != wireKind(pt) {
			t.Errorf("%s: the server writes a JSON %s, package api a %s", at, wireKind(st), wireKind(pt))
			continue
		}
		if !request && (sp != pp || s.omitempty != p.omitempty) {
			t.Errorf("%s: the server's null-able %v omitempty %v, package api's %v %v", at, sp, s.omitempty, pp, p.omitempty)
		}
		switch {
		case wireKind(st) == "object":
			sameWire(t, at, st, pt, request)
		case st.Kind() == reflect.Slice && wireKind(st.Elem()) == "object":
			sameWire(t, at+"[]", st.Elem(), pt.Elem(), request)
		}
	}
	for name := range pf {
		if _, ok := sf[name]; !ok {
			t.Errorf("%s.%s: package api has it, the server does not", path, name)
		}
	}
}

// The server's request bodies (read by its strict decoders, which name
// the offending field) and the wire types of package api agree member for
// member: JSON name and JSON type. A member added on one side only fails
// here. The answers are the api types themselves (TestNoViewTypes).
func TestBodiesAreTheAPITypes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		srv, pub reflect.Type
	}{
		{"FillupRequest", reflect.TypeFor[fillupBody](), reflect.TypeFor[api.FillupRequest]()},
		{"DrainRequest", reflect.TypeFor[drainBody](), reflect.TypeFor[api.DrainRequest]()},
		{"ReserveRequest", reflect.TypeFor[reserveBody](), reflect.TypeFor[api.ReserveRequest]()},
		{"CommitRequest", reflect.TypeFor[commitBody](), reflect.TypeFor[api.CommitRequest]()},
		{"MultiFillupItem", reflect.TypeFor[multiItem](), reflect.TypeFor[api.MultiFillupItem]()},
		{"PeriodPut", reflect.TypeFor[periodBody](), reflect.TypeFor[api.PeriodPut]()},
	} {
		sameWire(t, tc.name, tc.srv, tc.pub, true)
	}
	// The PUT body: the server also takes (and ignores) a document's name
	// and times, so that a GET document can be PUT back; its period is
	// decoded in a second step (PeriodPut above).
	body := wireFields(reflect.TypeFor[limitBody]())
	for name := range wireFields(reflect.TypeFor[api.LimitPut]()) {
		if _, ok := body[name]; !ok {
			t.Errorf("LimitPut.%s: package api has it, the server does not read it", name)
		}
		delete(body, name)
	}
	for name := range body {
		if name != "name" && name != "created_at" && name != "updated_at" {
			t.Errorf("LimitPut.%s: the server reads it, package api does not have it", name)
		}
	}
}

// The lean encoder of decisions (every single-bucket Fillup and CanAccept)
// writes byte for byte what encoding/json writes of the api type, for
// accepted, denied, never fitting and periodic decisions at every
// magnitude.
func TestAppendDecisionIsTheAPIType(t *testing.T) {
	a := bucket.MustAmount
	at := time.Date(2026, 11, 30, 23, 0, 0, 123456000, time.FixedZone("x", 3600))
	for i, d := range []bucket.Decision{
		{Accepted: true, Level: a("25000"), Remaining: a("75000"), Capacity: a("100000")},
		{Level: a("99998.811750000002"), Held: a("0.000000000001"), Remaining: a("1.188249999998"), Capacity: a("100000"), RetryAfter: bucket.MicrosOf(899_957_224)},
		{NeverFits: true, Level: a("1000000000000000"), Capacity: a("1")},
		{Accepted: true, Level: a("12.37"), Capacity: a("5000"), Remaining: a("4987.63"), PeriodStart: at, ResetsAt: at.AddDate(0, 1, 0)},
		{Level: a("5000"), Capacity: a("5000"), RetryAfter: bucket.MicrosOf(1), PeriodStart: at, ResetsAt: at.AddDate(0, 1, 0)},
		{Level: a("0.5"), Capacity: a("1"), Remaining: a("0.5"), RetryAfter: bucket.MicrosOf(86_400_000_000_000)},
		{Accepted: true, Level: a("120"), Capacity: a("100"), ShadowDenied: true},
		{Accepted: true, Level: a("105.5"), Capacity: a("100"), OverCapacity: true},
	} {
		for _, entry := range []string{"", "1843", "01HZX3"} {
			for j, override := range []string{"", "tenant-acme", "team \"a\"/<b>&*", "ü€😀*"} {
				terms := ledger.Limit{Override: override, Grants: decimal.RequireFromString([]string{"0", "500", "0.000001", "1000000000000"}[j]),
					Received: decimal.RequireFromString([]string{"0", "1000", "30", "0.000001"}[j])}
				want, err := json.Marshal(apiDecision(d, entry, terms))
				if err != nil {
					t.Fatal(err)
				}
				if got := appendDecision(nil, d, entry, terms); string(got) != string(want) {
					t.Errorf("%d (entry %q, terms %+v):\n got %s\nwant %s", i, entry, terms, got, want)
				}
			}
		}
	}
}

// The answer to a multi-bucket Fillup (writeMulti) is byte for byte what
// encoding/json writes of the api type, accepted and denied, with names and
// keys that need escaping (quotes, HTML, control characters, non-ASCII,
// invalid UTF-8) and one bucket named twice.
func TestAppendMultiIsTheAPIType(t *testing.T) {
	a := bucket.MustAmount
	at := time.Date(2026, 11, 30, 23, 0, 0, 123456000, time.UTC)
	accepted := bucket.Decision{Accepted: true, Level: a("25000"), Remaining: a("75000"), Capacity: a("100000")}
	periodic := bucket.Decision{Accepted: true, Level: a("12.37"), Capacity: a("5000"), Remaining: a("4987.63"), PeriodStart: at, ResetsAt: at.AddDate(0, 1, 0)}
	denied := bucket.Decision{Level: a("99998.81175"), Remaining: a("1.18825"), Capacity: a("100000"), RetryAfter: bucket.MicrosOf(899_957_224)}
	never := bucket.Decision{NeverFits: true, Level: a("0"), Remaining: a("1"), Capacity: a("1")}
	keys := []string{"k1", `team "a"`, "a<b", "a>b", "a&b", `back\slash`, "tab\tnew\nline\x01", "ü€😀", "line\u2028sep", "del\x7f", "bad\xffutf8"}
	for _, tc := range []struct {
		accepted bool
		ds       []bucket.Decision
		entries  []string
	}{
		{true, []bucket.Decision{accepted}, []string{"17"}},
		{true, []bucket.Decision{accepted, periodic, accepted}, []string{"1", "", "1"}},
		{false, []bucket.Decision{accepted, denied, never}, []string{"", "2", ""}},
	} {
		for k := range keys {
			var items []ledger.Item
			var limits []ledger.Limit
			want := api.MultiFillupResult{Accepted: tc.accepted, Items: []api.MultiFillupItemDecision{}}
			for i, d := range tc.ds {
				ref := ledger.BucketRef{Limit: "tier-" + strconv.Itoa(i), Key: keys[(k+i)%len(keys)]}
				items = append(items, ledger.Item{Bucket: ref})
				override := ""
				if i%2 == 1 {
					override = keys[(k+i)%len(keys)] + "*" // a prefix pattern that needs escaping like its key
				}
				terms := ledger.Limit{Name: ref.Limit, Override: override, Grants: decimal.NewFromInt(int64(i * 250)), Received: decimal.NewFromInt(int64(i * 100))}
				limits = append(limits, terms)
				want.Items = append(want.Items, api.MultiFillupItemDecision{Limit: ref.Limit, Key: ref.Key, Decision: apiDecision(d, tc.entries[i], terms)})
			}
			res := ledger.FillupResult{Accepted: tc.accepted, Items: tc.ds, EntryIDs: tc.entries, Limits: limits}
			wantJSON, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendMulti(nil, items, res); string(got) != string(wantJSON) {
				t.Errorf("keys from %d:\n got %s\nwant %s", k, got, wantJSON)
			}
		}
	}
}
