package redis

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/ledger"
)

// luaCode is the library's Lua without comments.
func luaCode() string {
	return regexp.MustCompile(`--[^\n]*`).ReplaceAllString(arithLua+"\n"+budgetdLua, "")
}

// TestLibraryConstants: the policy constants and error codes exist once, in
// Go. The library gets them from luaConstants, so it must not spell out a
// policy number itself; every code it answers with must be declared there
// and have a ledger error; and the store's history policy is the memory
// store's.
func TestLibraryConstants(t *testing.T) {
	code := luaCode()
	policy := map[string]int64{
		"MAX_HOLDS": ledger.MaxHolds, "HIST_MAX": ledger.HistoryPerBucket,
		"IDEM_MS": ledger.IdempotencyRetention.Milliseconds(), "HIST_MS": ledger.HistoryRetention.Milliseconds(),
		"HOLD_KEEP_MS": ledger.ClosedHoldRetention.Milliseconds(), "SLACK_MS": ttlSlack.Milliseconds(),
	}
	consts := luaConstants()
	for name, v := range policy {
		if !strings.Contains(consts, "local "+name+" = "+strconv.FormatInt(v, 10)+"\n") {
			t.Errorf("luaConstants does not declare %s = %d:\n%s", name, v, consts)
		}
		// 1000 is also µs per ms; MAX_HOLDS is checked by use below.
		if v != 1000 && regexp.MustCompile(`\b`+strconv.FormatInt(v, 10)+`\b`).MatchString(code) {
			t.Errorf("the Lua spells out %d (%s) instead of using the constant", v, name)
		}
		if regexp.MustCompile(`local\s+` + name + `\b`).MatchString(code) {
			t.Errorf("the Lua declares %s again", name)
		}
	}
	if !strings.Contains(code, ">= MAX_HOLDS") || !strings.Contains(code, "nv(MAX_LEVEL)") {
		t.Error("the Lua does not test holds against MAX_HOLDS and levels against MAX_LEVEL")
	}
	if !strings.Contains(consts, "local MAX_LEVEL = '"+units(ledger.MaxLevel)+"'\n") {
		t.Errorf("luaConstants does not declare MAX_LEVEL as ledger.MaxLevel in units:\n%s", consts)
	}

	// Error codes: each E_ the Lua uses is declared in luaConstants with a
	// code that has a ledger error, and the Lua answers no code literally.
	declared := regexp.MustCompile(`local (E_[A-Z_, ]+) = ([^\n]+)\n`).FindStringSubmatch(consts)
	if declared == nil {
		t.Fatalf("luaConstants declares no error codes:\n%s", consts)
	}
	names := strings.Split(declared[1], ", ")
	values := strings.Split(declared[2], ", ")
	if len(names) != len(values) {
		t.Fatalf("error code declaration %q", declared[0])
	}
	for i, v := range values {
		c, err := strconv.Unquote(v)
		if err != nil || codeErrors[c] == nil {
			t.Errorf("%s = %s has no ledger error", names[i], v)
		}
	}
	for _, m := range regexp.MustCompile(`\bE_[A-Z_]+\b`).FindAllString(code, -1) {
		if !slices.Contains(names, m) {
			t.Errorf("the Lua answers %s, which luaConstants does not declare", m)
		}
	}
	if len(codeErrors) != len(names) {
		t.Errorf("Go knows %d error codes, the Lua %d", len(codeErrors), len(names))
	}
	for _, m := range regexp.MustCompile(`return \{ '([a-z_]+)'`).FindAllStringSubmatch(code, -1) {
		if m[1] != "replay" {
			t.Errorf("the Lua answers the literal code %q", m[1])
		}
	}
}
