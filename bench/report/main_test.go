package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gobench is what scripts/bench keeps of go test -bench -benchmem: two
// packages with a benchmark of the same name, one benchmark run three times.
const gobench = `goos: linux
goarch: amd64
cpu: AMD EPYC
BenchmarkCanAccept-2           	31031959	        39.06 ns/op	       0 B/op	       0 allocs/op
BenchmarkFillup-2              	13778616	        88.72 ns/op	       0 B/op	       0 allocs/op
ok  	github.com/budgetd/budgetd/internal/bucket	11.079s
goos: linux
goarch: amd64
cpu: AMD EPYC
BenchmarkFillup-2              	  329281	      3262 ns/op	    1288 B/op	      18 allocs/op
BenchmarkMultiFillup3-2        	   20000	     12000 ns/op	    4700 B/op	      31 allocs/op
BenchmarkMultiFillup3-2        	   20000	     12000 ns/op	    4700 B/op	      70 allocs/op
BenchmarkMultiFillup3-2        	   20000	     12000 ns/op	    4700 B/op	      30 allocs/op
ok  	github.com/budgetd/budgetd/internal/http	10.774s
`

func TestBenchAllocs(t *testing.T) {
	got := benchAllocs(gobench)
	want := map[string]float64{
		"internal/bucket.BenchmarkCanAccept":  0,
		"internal/bucket.BenchmarkFillup":     0,
		"internal/http.BenchmarkFillup":       18,
		"internal/http.BenchmarkMultiFillup3": 31,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v allocs/op, want %v", k, got[k], v)
		}
	}
}

// The report's Targets table lists issue 28's allocation targets with the
// Go benchmarks' figures, and says so when they were not measured.
func TestAllocTargetsInReport(t *testing.T) {
	dir := t.TempDir()
	md := markdown(map[string]string{}, nil, nil, nil, map[string]string{}, dir, "", "")
	if !strings.Contains(md, "| `internal/http` MultiFillup3 (three buckets in one call): ≤ 60 allocs/op | — | not measured |") {
		t.Errorf("no unmeasured MultiFillup3 target in:\n%s", md)
	}
	if err := os.WriteFile(filepath.Join(dir, "gobench.txt"), []byte(gobench), 0o644); err != nil {
		t.Fatal(err)
	}
	md = markdown(map[string]string{}, nil, nil, nil, map[string]string{}, dir, "", "")
	for _, line := range []string{
		"| `internal/bucket` Fillup (the bucket rule): ≤ 0 allocs/op | 0 | met |",
		"| `internal/http` Fillup (one bucket through the handler): ≤ 20 allocs/op | 18 | met |",
		"| `internal/http` MultiFillup3 (three buckets in one call): ≤ 60 allocs/op | 31 | met |",
	} {
		if !strings.Contains(md, line) {
			t.Errorf("no %q in:\n%s", line, md)
		}
	}
}
