package auth_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/budgetd/budgetd/internal/auth"
)

func TestParseAndAuthenticate(t *testing.T) {
	admin, _ := auth.NewToken()
	charger, _ := auth.NewToken()
	reader, _ := auth.NewToken()
	file := "# budgetd keys\n\n" +
		auth.Line("ops", admin, auth.Admin, nil) + "   # the on-call key\n" +
		"  " + auth.Line("team-svc", charger, auth.Charge, []string{"team-*", "shared"}) + "\n" +
		auth.Line("dash", reader, auth.Read, nil) + "\n"
	ks, err := auth.Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if ks.Len() != 3 || strings.Join(ks.Names(), " ") != "ops team-svc dash" {
		t.Fatalf("keys %v", ks.Names())
	}
	k, ok := ks.Authenticate(charger)
	if !ok || k.Name != "team-svc" {
		t.Fatalf("charger token: %v %v", k, ok)
	}
	for _, tc := range []struct {
		limit string
		ok    bool
	}{{"team-a", true}, {"team-", true}, {"shared", true}, {"shared2", false}, {"other", false}, {"team", false}} {
		if k.MayUse(tc.limit) != tc.ok {
			t.Errorf("team-svc on %q: %v, want %v", tc.limit, !tc.ok, tc.ok)
		}
	}
	if !k.Allows(auth.Read) || !k.Allows(auth.Charge) || k.Allows(auth.Admin) {
		t.Errorf("charge scope grants %v", k.Scopes)
	}
	if a, _ := ks.Authenticate(admin); !a.Allows(auth.Admin) || !a.Allows(auth.Read) || !a.AllLimits() || !a.MayUse("anything") {
		t.Errorf("admin key %+v", a)
	}
	if r, _ := ks.Authenticate(reader); r.Allows(auth.Charge) || !r.Allows(auth.Read) {
		t.Errorf("read key %+v", r)
	}
	for _, bad := range []string{"", admin + " ", admin + "\n", " " + admin, admin[:len(admin)-1], strings.ToUpper(admin), auth.Hash(admin), "sha256:" + admin} {
		if k, ok := ks.Authenticate(bad); ok {
			t.Errorf("token %q authenticated as %s", bad, k.Name)
		}
	}
}

func TestParseRefusesBadFiles(t *testing.T) {
	tok, _ := auth.NewToken()
	good := auth.Line("a", tok, auth.Read, nil)
	other, _ := auth.NewToken()
	for _, tc := range []struct {
		file string
		line int
		want string
	}{
		{"a " + tok + " read\n", 1, "sha256:"}, // a plain-text token
		{"a sha256:" + strings.Repeat("A", 64) + " read\n", 1, "lower-case"},
		{"a sha256:abc read\n", 1, "sha256:"},
		{"# c\n" + good + "\n" + auth.Line("a", other, auth.Read, nil) + "\n", 3, "already used on line 2"},
		{good + "\n" + auth.Line("b", tok, auth.Read, nil) + "\n", 2, "same token hash"},
		{"a " + auth.Hash(tok) + "\n", 1, "fields"},
		{"a " + auth.Hash(tok) + " read team-* extra\n", 1, "fields"},
		{"a " + auth.Hash(tok) + " write\n", 1, `unknown scope "write"`},
		{"a " + auth.Hash(tok) + " read,\n", 1, `unknown scope ""`},
		{"a " + auth.Hash(tok) + " read Team\n", 1, "limit pattern"},
		{"a " + auth.Hash(tok) + " read team-*x\n", 1, "limit pattern"},
		{"a " + auth.Hash(tok) + " read team,,b\n", 1, "limit pattern"},
		{"a/b " + auth.Hash(tok) + " read\n", 1, "name"},
	} {
		_, err := auth.Parse(strings.NewReader(tc.file))
		var le *auth.LineError
		if !errors.As(err, &le) || le.Line != tc.line || !strings.Contains(le.Error(), tc.want) {
			t.Errorf("%q: %v, want line %d mentioning %q", tc.file, err, tc.line, tc.want)
			continue
		}
		if strings.Contains(le.Error(), tok) {
			t.Errorf("the error repeats the token: %v", le)
		}
	}
}

func TestPatterns(t *testing.T) {
	ls, err := auth.ParseLimits("*")
	if err != nil || !auth.Match(ls[0], "x") {
		t.Fatalf("* %v %v", ls, err)
	}
	for _, tc := range []struct {
		pattern, name string
		ok            bool
	}{
		{"a", "a", true}, {"a", "ab", false}, {"a*", "ab", true}, {"a*", "a", true}, {"a*", "ba", false},
		{"team.x*", "team.xy", true}, {"team.x*", "teamxx", false},
	} {
		if auth.Match(tc.pattern, tc.name) != tc.ok {
			t.Errorf("Match(%q, %q) = %v", tc.pattern, tc.name, !tc.ok)
		}
	}
}

func TestScopes(t *testing.T) {
	s, err := auth.ParseScopes("read,admin")
	if err != nil || s.String() != "read,admin" || !s.Includes(auth.Charge) {
		t.Fatalf("%v %v", s, err)
	}
	if _, err := auth.ParseScopes(""); err == nil {
		t.Fatal("no scopes accepted")
	}
	tok, err := auth.NewToken()
	tok2, _ := auth.NewToken()
	if err != nil || tok == tok2 || len(tok) < 40 || strings.ContainsAny(tok, " \n+/=") {
		t.Fatalf("tokens %q %q %v", tok, tok2, err)
	}
}
