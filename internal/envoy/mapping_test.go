package envoy

import (
	"errors"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
)

func str(s string) *string { return &s }

func TestMatch(t *testing.T) {
	m, err := NewMapping([]Domain{
		{Domain: "api", Descriptors: []Rule{
			{Entries: []Entry{{Key: "tenant"}, {Key: "path", Value: str("/import")}}, Limit: "import-rows", Bucket: "{tenant}"},
			{Entries: []Entry{{Key: "tenant"}, {Key: "path"}}, Limit: "calls", Bucket: "{tenant}:{path}"},
			{Entries: []Entry{{Key: "tenant"}}, Limit: "spend", Bucket: "t-{tenant}-x"},
			{Entries: []Entry{{Key: "global"}}, Limit: "all", Bucket: "everyone"},
		}},
		{Domain: "other", Descriptors: []Rule{
			{Entries: []Entry{{Key: "tenant"}}, Limit: "other-spend", Bucket: "{tenant}"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := func(kv ...string) []DescriptorEntry {
		var out []DescriptorEntry
		for i := 0; i < len(kv); i += 2 {
			out = append(out, DescriptorEntry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name, domain string
		entries      []DescriptorEntry
		limit, key   string
		ok           bool
	}{
		{"fixed value, first rule wins", "api", e("tenant", "acme", "path", "/import"), "import-rows", "acme", true},
		{"wildcard value", "api", e("tenant", "acme", "path", "/export"), "calls", "acme:/export", true},
		{"one entry", "api", e("tenant", "acme"), "spend", "t-acme-x", true},
		{"no placeholder", "api", e("global", "x"), "all", "everyone", true},
		{"keys out of order", "api", e("path", "/import", "tenant", "acme"), "", "", false},
		{"more entries than any rule", "api", e("tenant", "a", "path", "/p", "x", "y"), "", "", false},
		{"unknown key", "api", e("user", "bob"), "", "", false},
		{"no entries", "api", nil, "", "", false},
		{"other domain", "other", e("tenant", "acme"), "other-spend", "acme", true},
		{"unmapped domain", "nope", e("tenant", "acme"), "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit, key, ok := m.Match(tc.domain, tc.entries)
			if limit != tc.limit || key != tc.key || ok != tc.ok {
				t.Fatalf("Match = %q, %q, %v; want %q, %q, %v", limit, key, ok, tc.limit, tc.key, tc.ok)
			}
		})
	}
}

func TestNewMappingRefuses(t *testing.T) {
	ok := Rule{Entries: []Entry{{Key: "tenant"}}, Limit: "spend", Bucket: "{tenant}"}
	for _, tc := range []struct {
		name    string
		domains []Domain
		field   string
		reason  string
	}{
		{"no domain", []Domain{{Descriptors: []Rule{ok}}}, "envoy[0].domain", "required"},
		{"domain twice", []Domain{{Domain: "a"}, {Domain: "a"}}, "envoy[1].domain", "already mapped"},
		{"no entries", []Domain{{Domain: "a", Descriptors: []Rule{ok, {Limit: "x", Bucket: "b"}}}}, "envoy[0].descriptors[1].entries", "at least one"},
		{"empty key", []Domain{{Domain: "a", Descriptors: []Rule{{Entries: []Entry{{Key: ""}}, Limit: "x", Bucket: "b"}}}}, "envoy[0].descriptors[0].entries[0].key", "required"},
		{"key twice", []Domain{{Domain: "a", Descriptors: []Rule{{Entries: []Entry{{Key: "k"}, {Key: "k"}}, Limit: "x", Bucket: "b"}}}}, "envoy[0].descriptors[0].entries[1].key", "twice"},
		{"bad limit name", []Domain{{Domain: "a", Descriptors: []Rule{{Entries: []Entry{{Key: "k"}}, Limit: "no spaces", Bucket: "b"}}}}, "envoy[0].descriptors[0].limit", "not a limit name"},
		{"no bucket", []Domain{{Domain: "a", Descriptors: []Rule{{Entries: []Entry{{Key: "k"}}, Limit: "x"}}}}, "envoy[0].descriptors[0].bucket", "required"},
		{"unknown placeholder", []Domain{{Domain: "a", Descriptors: []Rule{{Entries: []Entry{{Key: "k"}}, Limit: "x", Bucket: "{j}"}}}}, "envoy[0].descriptors[0].bucket", "{j} names no entry"},
		{"unclosed", []Domain{{Domain: "a", Descriptors: []Rule{{Entries: []Entry{{Key: "k"}}, Limit: "x", Bucket: "a{k"}}}}, "envoy[0].descriptors[0].bucket", "without its '}'"},
		{"stray close", []Domain{{Domain: "a", Descriptors: []Rule{{Entries: []Entry{{Key: "k"}}, Limit: "x", Bucket: "k}"}}}}, "envoy[0].descriptors[0].bucket", "without its '{'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewMapping(tc.domains)
			var ie *ledger.InvalidError
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want an *ledger.InvalidError", err)
			}
			if ie.Field != tc.field || !strings.Contains(ie.Reason, tc.reason) {
				t.Fatalf("err = %q (field %q), want field %q and a reason with %q", err, ie.Field, tc.field, tc.reason)
			}
		})
	}
}
