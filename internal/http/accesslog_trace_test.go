package http_test

import (
	"context"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	budgethttp "github.com/budgetd/budgetd/internal/http"
)

// TestAccessLineTraceIDIsSlogs: a traced request's line ends with its trace
// id as slog writes a last attribute trace_id of 32 hex digits; an untraced
// request's line has no trace_id at all (TestAccessLineIsSlogs).
func TestAccessLineTraceIDIsSlogs(t *testing.T) {
	id := [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	// slog's own rendering of the attribute, in either format.
	var text, json strings.Builder
	slog.New(slog.NewTextHandler(&text, nil)).Info("", "trace_id", hex.EncodeToString(id[:]))
	slog.New(slog.NewJSONHandler(&json, nil)).Info("", "trace_id", hex.EncodeToString(id[:]))
	attr := map[budgethttp.AccessFormat]string{
		budgethttp.AccessText: " " + text.String()[strings.Index(text.String(), "trace_id="):len(text.String())-1],
		budgethttp.AccessJSON: "," + json.String()[strings.Index(json.String(), `"trace_id":`):len(json.String())-2],
	}
	at := time.Date(2026, 11, 25, 16, 9, 52, 123456789, time.UTC)
	for _, f := range accessFormats {
		for _, withPath := range []bool{false, true} {
			untraced := slogLine(t, f.format, at, "POST", "/v1/fillup", 200, time.Millisecond, "abc", "-", "/v1/fillup", withPath)
			end := len(untraced) - len("\n")
			if f.format == budgethttp.AccessJSON {
				end = len(untraced) - len("}\n")
			}
			want := untraced[:end] + attr[f.format] + untraced[end:]
			var got strings.Builder
			a := budgethttp.NewAccessLog(&got, f.format)
			a.Log(budgethttp.NewAccessLine(at, "POST", "/v1/fillup", 200, time.Millisecond, "abc", "-", "/v1/fillup", withPath).WithTraceID(id))
			if err := a.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got.String() != want {
				t.Errorf("%s line\n got %q\nwant %q", f.name, got.String(), want)
			}
		}
	}
}
