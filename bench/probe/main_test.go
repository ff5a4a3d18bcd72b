package main

import (
	"slices"
	"testing"
)

func TestMonitorArgs(t *testing.T) {
	// A line as redis-cli MONITOR printed it for
	// EVAL 'return ARGV[1]' 1 'k"ey' 'a b\n' $'x\001y'.
	line := `1795406329.153548 [0 127.0.0.1:53992] "eval" "return ARGV[1]" "1" "k\"ey" "a b\\n" "x\x01y"`
	got, err := monitorArgs(line)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"eval", "return ARGV[1]", "1", `k"ey`, `a b\n`, "x\x01y"}
	if !slices.Equal(got, want) {
		t.Fatalf("monitorArgs = %q, want %q", got, want)
	}
	for _, bad := range []string{"OK", `1.0 [0 x] "open`, `1.0 [0 x] bare`} {
		if _, err := monitorArgs(bad); err == nil {
			t.Errorf("monitorArgs(%q) succeeded", bad)
		}
	}
}
