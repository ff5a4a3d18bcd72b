package auth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/auth"
)

// FuzzParse: any file either parses or fails with a *LineError naming a line
// of the file, and never echoes the second field (a secret, if someone put
// the token there).
func FuzzParse(f *testing.F) {
	f.Add("ops sha256:" + strings.Repeat("ab", 32) + " admin\n")
	f.Add("# c\nteam sha256:" + strings.Repeat("0f", 32) + " read,charge team-*,shared # x\n\n")
	f.Add("a bdg_secret read\n")
	f.Fuzz(func(t *testing.T, file string) {
		ks, err := auth.Parse(strings.NewReader(file))
		if err != nil {
			var le *auth.LineError
			if !errors.As(err, &le) {
				return // a line longer than the scanner allows
			}
			if le.Line < 1 || le.Line > strings.Count(file, "\n")+1 {
				t.Fatalf("line %d of a %d-line file", le.Line, strings.Count(file, "\n")+1)
			}
			lines := strings.Split(file, "\n")
			if f := strings.Fields(strings.SplitN(lines[le.Line-1], "#", 2)[0]); len(f) > 1 && len(f[1]) > 8 && strings.Contains(le.Reason, f[1]) {
				t.Fatalf("the error repeats the second field: %v", le)
			}
			return
		}
		for _, name := range ks.Names() {
			if auth.ValidateName(name) != nil {
				t.Fatalf("parsed a bad name %q", name)
			}
		}
		ks.Authenticate(file)
	})
}
