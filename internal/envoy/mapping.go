// Package envoy serves Envoy's rate-limit service protocol
// (envoy.service.ratelimit.v3) on top of the ledger, and holds the mapping
// from a request's domain and descriptors to budgetd's limits and bucket
// keys (../shared/SPEC.md "Behind Envoy").
package envoy

import (
	"fmt"
	"strings"

	"github.com/budgetd/budgetd/internal/ledger"
)

// Domain is the mapping of one Envoy domain: its rules, tried in order. It
// is the form of one member of the limits file's "envoy" list.
type Domain struct {
	Domain      string `json:"domain"`
	Descriptors []Rule `json:"descriptors"`
}

// Rule maps the descriptors that match it to a limit and a bucket key.
type Rule struct {
	Entries []Entry `json:"entries"`
	Limit   string  `json:"limit"`
	// Bucket is the bucket key, with {KEY} replaced by the value of the
	// descriptor's entry KEY.
	Bucket string `json:"bucket"`
}

// Entry is one entry of a rule: a descriptor's entry at the same position
// matches when it has the key and, when Value is set, that value.
type Entry struct {
	Key   string  `json:"key"`
	Value *string `json:"value,omitempty"`
}

// DescriptorEntry is one entry of a request's descriptor.
type DescriptorEntry struct {
	Key, Value string
}

// Mapping resolves descriptors; it is safe for concurrent use (it is never
// changed after NewMapping).
type Mapping struct {
	domains map[string][]compiled
}

type compiled struct {
	rule  Rule
	parts []part // the bucket template: literal text and entry references
}

type part struct {
	text  string
	entry int // the entry whose value this part is; -1: text
}

// NewMapping checks the domains and builds their mapping. An error is a
// *ledger.InvalidError whose Field is the member's path in the limits file
// (envoy[0].descriptors[1].bucket).
func NewMapping(domains []Domain) (*Mapping, error) {
	m := &Mapping{domains: map[string][]compiled{}}
	seen := map[string]int{}
	for i, d := range domains {
		at := fmt.Sprintf("envoy[%d]", i)
		if d.Domain == "" {
			return nil, invalid(at+".domain", "is required")
		}
		if j, dup := seen[d.Domain]; dup {
			return nil, invalid(at+".domain", fmt.Sprintf("%q is already mapped by envoy[%d]", d.Domain, j))
		}
		seen[d.Domain] = i
		for k, r := range d.Descriptors {
			c, err := compile(r, fmt.Sprintf("%s.descriptors[%d]", at, k))
			if err != nil {
				return nil, err
			}
			m.domains[d.Domain] = append(m.domains[d.Domain], c)
		}
	}
	return m, nil
}

func compile(r Rule, at string) (compiled, error) {
	if len(r.Entries) == 0 {
		return compiled{}, invalid(at+".entries", "needs at least one entry")
	}
	index := map[string]int{}
	for i, e := range r.Entries {
		if e.Key == "" {
			return compiled{}, invalid(fmt.Sprintf("%s.entries[%d].key", at, i), "is required")
		}
		if _, dup := index[e.Key]; dup {
			return compiled{}, invalid(fmt.Sprintf("%s.entries[%d].key", at, i), fmt.Sprintf("%q appears twice", e.Key))
		}
		index[e.Key] = i
	}
	if err := ledger.ValidateName(r.Limit); err != nil {
		return compiled{}, &ledger.InvalidError{Code: ledger.CodeInvalidName, Field: at + ".limit", Reason: fmt.Sprintf("%q is not a limit name", r.Limit)}
	}
	if r.Bucket == "" {
		return compiled{}, invalid(at+".bucket", "is required")
	}
	var parts []part
	rest := r.Bucket
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			parts = append(parts, part{text: rest, entry: -1})
			break
		}
		if rest[open] == '}' {
			return compiled{}, invalid(at+".bucket", "has a '}' without its '{'")
		}
		if open > 0 {
			parts = append(parts, part{text: rest[:open], entry: -1})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return compiled{}, invalid(at+".bucket", "has a '{' without its '}'")
		}
		name := rest[open+1 : open+end]
		i, ok := index[name]
		if !ok {
			return compiled{}, invalid(at+".bucket", fmt.Sprintf("{%s} names no entry of the rule", name))
		}
		parts = append(parts, part{entry: i})
		rest = rest[open+end+1:]
	}
	return compiled{rule: r, parts: parts}, nil
}

// Match returns the limit and bucket key of the first rule of domain that
// the descriptor matches: the descriptor has the rule's keys, in its order
// and no others, with the rule's fixed values. ok is false when none does:
// the descriptor is then not limited.
func (m *Mapping) Match(domain string, entries []DescriptorEntry) (limit, key string, ok bool) {
	for _, c := range m.domains[domain] {
		if !c.matches(entries) {
			continue
		}
		var b strings.Builder
		for _, p := range c.parts {
			if p.entry < 0 {
				b.WriteString(p.text)
			} else {
				b.WriteString(entries[p.entry].Value)
			}
		}
		return c.rule.Limit, b.String(), true
	}
	return "", "", false
}

func (c compiled) matches(entries []DescriptorEntry) bool {
	if len(entries) != len(c.rule.Entries) {
		return false
	}
	for i, e := range c.rule.Entries {
		if entries[i].Key != e.Key || e.Value != nil && entries[i].Value != *e.Value {
			return false
		}
	}
	return true
}

func invalid(path, reason string) error {
	return &ledger.InvalidError{Code: ledger.CodeInvalidRequest, Field: path, Reason: reason}
}
