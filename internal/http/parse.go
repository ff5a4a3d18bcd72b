package http

import (
	"github.com/budgetd/budgetd/api"
	"github.com/budgetd/budgetd/internal/ledger"
)

// The functions below give other packages (the limits file,
// internal/limitsfile) the one reading of a limit's and an override's PUT
// body that the API uses, so that a body is accepted or refused, with the
// same field named, wherever it comes from.

// ParseLimit reads body, the JSON of a PUT /v1/limits/{name} body, as the
// API does: unknown and duplicate members, malformed numbers and durations
// and an unknown zone are refused with an error naming the member
// (*ledger.InvalidError). A "name" member must equal name. What the body
// leaves out takes its default (history on). The rules that need no body
// (ledger.CheckLimit) are not applied here.
func ParseLimit(name string, body []byte) (ledger.LimitSpec, error) {
	var b limitBody
	if err := decodeBody(body, &b); err != nil {
		return ledger.LimitSpec{}, err
	}
	return b.spec(name)
}

// ParseOverride reads body, the JSON of a PUT
// /v1/limits/{name}/overrides/{pattern} body, as the API does (see
// ParseLimit). A "pattern" member must equal pattern. Checks against the
// override's limit are ledger.ValidateOverride's.
func ParseOverride(pattern string, body []byte) (ledger.Override, error) {
	var b overrideBody
	if err := decodeBody(body, &b); err != nil {
		return ledger.Override{Pattern: pattern}, err
	}
	return b.parse(pattern)
}

// LimitDocument is l as the API shows it (GET /v1/limits/{name}).
func LimitDocument(l ledger.Limit) api.Limit { return apiLimit(l) }

// OverrideDocument is o as the API shows it (GET …/overrides/{pattern}).
func OverrideDocument(o ledger.Override) api.Override { return apiOverride(o) }
