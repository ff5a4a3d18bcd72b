package main

import (
	"strings"
	"testing"
)

// Latencies come from the third field of each logged transaction; a failed
// or skipped one has none and is left out, and a malformed line is an error.
func TestPgbenchLatencies(t *testing.T) {
	log := "1 1 3266 0 1795703259 637854\n0 1 228 0 1795703259 640081\n2 7 failed 0 1795703259 640104\n3 1 skipped 0 1795703259 640105\n"
	got, err := pgbenchLatencies(strings.NewReader(log), []float64{5})
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{5, 3266, 228}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := pgbenchLatencies(strings.NewReader("not a log line\n"), nil); err == nil {
		t.Error("a malformed line was read without an error")
	}
}
