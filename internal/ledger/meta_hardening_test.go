package ledger

import (
	"errors"
	"testing"
)

// TestValidateMetaControl: a meta value with NUL (which PostgreSQL's jsonb
// cannot hold) or another control character but tab, line feed and carriage
// return is refused naming the value's field, on a single call and on an
// item of a multi-bucket call alike; tabs and line breaks are kept.
func TestValidateMetaControl(t *testing.T) {
	for _, v := range []string{"a\x00b", "\x00", "a\x01", "\x1b[31mred", "a\x7fb", "\x1f", "ok\x00"} {
		for _, field := range []string{"meta", "items[0].meta"} {
			err := ValidateMeta(field, Meta{"order": v})
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Code != "invalid_request" || inv.Field != field+".order" {
				t.Errorf("ValidateMeta(%s, %q) = %v, want invalid_request naming %s.order", field, v, err, field)
			}
		}
	}
	for _, v := range []string{"line 1\nline 2", "a\tb", "a\r\nb", "ünïcödé ✓", "\u0085 is C1, allowed", ""} {
		if err := ValidateMeta("meta", Meta{"note": v}); err != nil {
			t.Errorf("ValidateMeta(%q) = %v", v, err)
		}
	}
}
