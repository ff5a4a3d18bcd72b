package postgres

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/migrations"
)

// TestPolicyOnce fails when a function file writes out a policy constant or
// an error code instead of calling the generated function that holds it
// (policy.go), and when a code the Go side translates is not generated.
func TestPolicyOnce(t *testing.T) {
	names, err := fs.Glob(migrations.Functions, "functions/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("function files: %v %v", names, err)
	}
	comment := regexp.MustCompile(`--[^\n]*`)
	forbidden := map[string]*regexp.Regexp{
		"an error code (use budgetd_code_NAME())":                     regexp.MustCompile(`'BD\d{3}'`),
		"a duration (use budgetd_idempotency_ttl() and the like)":     regexp.MustCompile(`(?i)interval\s+'[^']*'`),
		"the level bound (use budgetd_max_level())":                   regexp.MustCompile(`\b1000000000000000\b`),
		"the hold bound (use budgetd_max_holds())":                    regexp.MustCompile(`(?i)count\s*>=?\s*\d`),
		"the history cap (use budgetd_history_cap())":                 regexp.MustCompile(`(?i)OFFSET\s+\d`),
		"the idempotency TTL in another form (budgetd_idempotency_*)": regexp.MustCompile(`(?i)'\d+\s*(hours?|days?|minutes?)'`),
	}
	for _, n := range names {
		b, err := fs.ReadFile(migrations.Functions, n)
		if err != nil {
			t.Fatal(err)
		}
		code := comment.ReplaceAllString(string(b), "")
		for what, re := range forbidden {
			if m := re.FindString(code); m != "" {
				t.Errorf("%s writes out %s: %q", n, what, m)
			}
		}
	}
	gen := policySQL()
	for _, c := range []string{codeIdempotencyRace, codeLimitNotFound, codeTooManyHolds, codeLevelOverflow, codeReservationNotFound, codeKeyReused, codeGrantNotFound, codeClockStep} {
		if !strings.Contains(gen, "'"+c+"'") {
			t.Errorf("code %s is not generated for SQL", c)
		}
	}
}
