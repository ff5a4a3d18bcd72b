// Package auth holds budgetd's API keys: the key file format, the scopes a
// key grants and the limits it may act on, token minting, and the
// constant-time lookup of a bearer token. It does no I/O beyond reading the
// file it is given and knows nothing of HTTP.
//
// The file has one key per line, '#' starts a comment:
//
//	NAME sha256:HEX SCOPES [LIMITS]
//
// NAME names the key in logs; HEX is the SHA-256 of the secret token in
// lower-case hex (the token itself is never stored); SCOPES is a
// comma-separated subset of read, charge and admin; LIMITS, optional, is a
// comma-separated list of limit names, each exact or a prefix ending in '*'
// (default: every limit).
package auth

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// Scope is a set of rights. Admin includes Charge, which includes Read.
type Scope uint8

// The scopes a key may hold.
const (
	// Read allows GET of limits, buckets, CanAccept, history and holds, and
	// /metrics.
	Read Scope = 1 << iota
	// Charge allows Read plus Fillup, multi-bucket Fillup, Reserve, Commit
	// and Release.
	Charge
	// Admin allows everything, including PUT and DELETE of limits and Drain.
	Admin
)

// scopeNames lists the scopes in the file's spelling, weakest first.
var scopeNames = []struct {
	scope Scope
	name  string
}{{Read, "read"}, {Charge, "charge"}, {Admin, "admin"}}

// ParseScopes reads a comma-separated list of scope names.
func ParseScopes(s string) (Scope, error) {
	if s == "" {
		return 0, errors.New("no scopes: want read, charge or admin, separated by commas")
	}
	var sc Scope
	for _, part := range strings.Split(s, ",") {
		found := false
		for _, n := range scopeNames {
			if part == n.name {
				sc |= n.scope
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown scope %q: want read, charge or admin", part)
		}
	}
	return sc, nil
}

// String writes the scopes as the file spells them.
func (s Scope) String() string {
	var parts []string
	for _, n := range scopeNames {
		if s&n.scope != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, ",")
}

// Includes reports whether the scopes grant want: admin grants everything,
// charge grants read.
func (s Scope) Includes(want Scope) bool {
	switch {
	case s&Admin != 0:
		return true
	case s&Charge != 0:
		return want&^(Charge|Read) == 0
	case s&Read != 0:
		return want&^Read == 0
	}
	return false
}

// Key is one API key: its name, rights and the limits it may act on.
type Key struct {
	// Name identifies the key in logs and audit lines; never the token.
	Name string
	// Scopes are the rights the key grants.
	Scopes Scope
	// Limits are the limit-name patterns the key may act on, each exact or
	// a prefix ending in '*'; nil means every limit.
	Limits []string

	hash [sha256.Size]byte
	line int
}

// Allows reports whether the key grants the scope want.
func (k *Key) Allows(want Scope) bool { return k.Scopes.Includes(want) }

// AllLimits reports whether the key may act on every limit.
func (k *Key) AllLimits() bool { return k.Limits == nil }

// MayUse reports whether the key may act on the limit named name.
func (k *Key) MayUse(name string) bool {
	if k.Limits == nil {
		return true
	}
	for _, p := range k.Limits {
		if Match(p, name) {
			return true
		}
	}
	return false
}

// Match reports whether the limit name matches pattern: equal to it, or,
// when pattern ends in '*', starting with what precedes the '*'.
func Match(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

// Keys is a parsed key file. It is immutable and safe for concurrent use.
type Keys struct {
	keys []*Key
}

// Len is the number of keys.
func (ks *Keys) Len() int { return len(ks.keys) }

// Names lists the keys' names in file order.
func (ks *Keys) Names() []string {
	names := make([]string, len(ks.keys))
	for i, k := range ks.keys {
		names[i] = k.Name
	}
	return names
}

// Authenticate returns the key whose token is token. It hashes the token and
// compares the hash with every key's in constant time, so neither the
// position of a match nor the length of a common prefix shows in the time it
// takes.
func (ks *Keys) Authenticate(token string) (*Key, bool) {
	if token == "" {
		return nil, false
	}
	sum := sha256.Sum256([]byte(token))
	var found *Key
	for _, k := range ks.keys {
		if subtle.ConstantTimeCompare(sum[:], k.hash[:]) == 1 {
			found = k
		}
	}
	return found, found != nil
}

// LineError is a key file that does not parse: the line and what is wrong
// with it. It never repeats the line, which might hold a secret.
type LineError struct {
	Line   int
	Reason string
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
	hashRE    = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	limitRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	prefixRE  = regexp.MustCompile(`^([a-z0-9][a-z0-9._-]{0,62})?\*$`)
	maxLineSz = 64 << 10
)

// ParseFile reads the key file at path.
func ParseFile(path string) (*Keys, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ks, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ks, nil
}

// Parse reads a key file. Any bad line, a duplicate name or a duplicate
// token fails the whole file with a *LineError.
func Parse(r io.Reader) (*Keys, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLineSz)
	ks := &Keys{}
	names := map[string]int{}
	hashes := map[[sha256.Size]byte]int{}
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		k, err := parseLine(fields)
		if err != nil {
			return nil, &LineError{Line: n, Reason: err.Error()}
		}
		k.line = n
		if prev, ok := names[k.Name]; ok {
			return nil, &LineError{Line: n, Reason: fmt.Sprintf("the name %q is already used on line %d", k.Name, prev)}
		}
		if prev, ok := hashes[k.hash]; ok {
			return nil, &LineError{Line: n, Reason: fmt.Sprintf("the same token hash is already used on line %d", prev)}
		}
		names[k.Name], hashes[k.hash] = n, n
		ks.keys = append(ks.keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	return ks, nil
}

func parseLine(fields []string) (*Key, error) {
	if len(fields) < 3 || len(fields) > 4 {
		return nil, fmt.Errorf("want NAME sha256:HEX SCOPES [LIMITS], found %d fields", len(fields))
	}
	k := &Key{Name: fields[0]}
	if !nameRE.MatchString(k.Name) {
		return nil, errors.New("the name must be 1 to 64 characters of A-Z a-z 0-9 . _ @ - starting with a letter or digit")
	}
	if !hashRE.MatchString(fields[1]) {
		return nil, errors.New("the second field must be sha256: and 64 lower-case hex digits, the SHA-256 of the token (never the token itself; `budgetd token` prints a ready line)")
	}
	if _, err := hex.Decode(k.hash[:], []byte(strings.TrimPrefix(fields[1], "sha256:"))); err != nil {
		return nil, errors.New("the hash is not hex")
	}
	var err error
	if k.Scopes, err = ParseScopes(fields[2]); err != nil {
		return nil, err
	}
	if len(fields) == 4 {
		if k.Limits, err = ParseLimits(fields[3]); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// ParseLimits reads a comma-separated list of limit-name patterns: exact
// names or prefixes ending in '*'.
func ParseLimits(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if !limitRE.MatchString(p) && !prefixRE.MatchString(p) {
			return nil, fmt.Errorf("limit pattern %q: want a limit name or a prefix ending in * (team-*)", p)
		}
		out = append(out, p)
	}
	return out, nil
}

// tokenPrefix marks budgetd tokens so that secret scanners can find them.
const tokenPrefix = "bdg_"

// NewToken returns a new random token: 256 bits from crypto/rand.
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Hash is the file's spelling of a token's hash: sha256: and lower-case hex.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Line is the key-file line for a key with this token; limits may be empty
// (every limit).
func Line(name, token string, scopes Scope, limits []string) string {
	line := name + " " + Hash(token) + " " + scopes.String()
	if len(limits) > 0 {
		line += " " + strings.Join(limits, ",")
	}
	return line
}

// ValidateName checks a key name as Parse does.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("key name %q: want 1 to 64 characters of A-Z a-z 0-9 . _ @ - starting with a letter or digit", name)
	}
	return nil
}
