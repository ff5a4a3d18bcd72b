package middleware_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoEchoForNetHTTP: a program that imports client/middleware for
// net/http alone does not compile echo in; echo's adapter is package echomw.
func TestNoEchoForNetHTTP(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/budgetd/budgetd/client/middleware").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/labstack/") {
			t.Errorf("client/middleware depends on %s; keep echo in client/middleware/echomw", p)
		}
	}
}
