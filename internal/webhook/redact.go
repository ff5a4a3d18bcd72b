package webhook

import (
	"net/url"
	"strings"
)

// Redacted is what RedactURL writes in place of a secret.
const Redacted = "REDACTED"

// RedactURL returns raw as budgetd may log it: a URL's secrets — the
// password of its userinfo, its whole query string and its fragment — each
// replaced by REDACTED, the scheme, user, host and path kept. A webhook
// receiver's token (https://hooks.example.com/in?token=…) and a store's
// password (postgres://u:…@host/db, postgres://host/db?password=…,
// redis://:…@host) are both secrets of this kind; the query goes whole
// because no list of parameter names is complete. Text that does not parse
// as a URL keeps only what follows its last "@" and precedes its first "?".
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		s := raw
		if i := strings.IndexAny(s, "?#"); i >= 0 {
			s = s[:i] + s[i:i+1] + Redacted
		}
		if i := strings.LastIndex(s, "@"); i >= 0 {
			s = "…" + s[i:]
		}
		return s
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Redacted)
		}
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = Redacted, false
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = Redacted, ""
	}
	return u.String()
}

// redactError returns err with the URL of a failed request (net/http's
// *url.Error, which keeps the query and, masked, the password) in the form
// of RedactURL, so that a logged failure does not leak the receiver's token.
func redactError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return &url.Error{Op: ue.Op, URL: RedactURL(ue.URL), Err: ue.Err}
	}
	return err
}
