// Command abtest runs Go benchmarks of two or more test binaries side by side
// (built with go test -c from different commits), alternating them in a new
// random order every round, so that the noise of a shared machine falls on
// all alike. For each binary and benchmark it reports the median wall-clock
// ns/op Go prints and the median CPU ns/op: the process's user and system
// time of a run of n calls less that of a run of n/6 calls, divided by the
// difference, so that start-up and set-up cancel out. Then each binary's
// medians against the first's, and the median of its per-round ratios to
// the first's with a 95% interval (paired.go).
//
//	go test -c -o /tmp/old.test ./internal/http/   # in a checkout of the old commit
//	go test -c -o /tmp/new.test ./internal/http/
//	go run ./bench/abtest -bench '^BenchmarkFillup$' -n 24000 -rounds 15 old=/tmp/old.test new=/tmp/new.test
//
// docs/tracing.md ("What it costs") quotes its figures.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

type binary struct{ name, path string }

// sample is one round's figures of one benchmark of one binary.
type sample struct{ ns, cpuNs float64 }

func main() {
	bench := flag.String("bench", "^BenchmarkFillup$", "the benchmarks to run (-test.bench)")
	n := flag.Int("n", 24000, "calls per long run (-test.benchtime Nx); the short run makes n/6")
	rounds := flag.Int("rounds", 15, "rounds; each runs every binary twice (n and n/6 calls)")
	cpu := flag.Int("cpu", 1, "GOMAXPROCS of the runs (-test.cpu)")
	flag.Parse()
	var bins []binary
	for _, a := range flag.Args() {
		name, path, ok := strings.Cut(a, "=")
		if !ok {
			fatalf("abtest: give NAME=TEST_BINARY, got %q", a)
		}
		bins = append(bins, binary{name, path})
	}
	if len(bins) < 1 || *n < 6 || *rounds < 1 {
		fatalf("abtest: give at least one NAME=TEST_BINARY, -n ≥ 6 and -rounds ≥ 1")
	}
	got := map[string]map[string][]sample{} // binary → benchmark → samples
	for _, b := range bins {
		got[b.name] = map[string][]sample{}
	}
	var names []string // benchmarks, in the order first seen
	for r := range *rounds {
		order := rand.Perm(len(bins))
		for _, i := range order {
			b := bins[i]
			long, longCPU, err := run(b.path, *bench, *n, *cpu)
			if err != nil {
				fatalf("abtest: %s: %v", b.name, err)
			}
			_, shortCPU, err := run(b.path, *bench, *n/6, *cpu)
			if err != nil {
				fatalf("abtest: %s: %v", b.name, err)
			}
			calls := float64(*n - *n/6)
			// The CPU of one process is shared by its benchmarks: spread
			// it by their wall-clock shares of the long run.
			var wall float64
			for _, ns := range long {
				wall += ns
			}
			for bn, ns := range long {
				if !slices.Contains(names, bn) {
					names = append(names, bn)
				}
				cpuNs := float64((longCPU - shortCPU).Nanoseconds()) / calls * ns / wall
				got[b.name][bn] = append(got[b.name][bn], sample{ns, cpuNs})
				fmt.Printf("round %d %s %s %.0f ns/op %.0f CPU ns/op\n", r+1, b.name, bn, ns, cpuNs)
			}
		}
	}
	fmt.Printf("\n| benchmark | binary | ns/op (median) | CPU ns/op (median) | ns/op vs %s | CPU vs %s |\n| --- | --- | ---: | ---: | ---: | ---: |\n", bins[0].name, bins[0].name)
	for _, bn := range names {
		base := medians(got[bins[0].name][bn])
		for _, b := range bins {
			m := medians(got[b.name][bn])
			fmt.Printf("| %s | %s | %.0f | %.0f | %.3f | %.3f |\n", bn, b.name, m.ns, m.cpuNs, m.ns/base.ns, m.cpuNs/base.cpuNs)
		}
	}
	printPaired(bins, names, got)
}

// run runs the binary's benchmarks once with n calls each, and returns each
// benchmark's ns/op and the process's CPU time.
func run(path, bench string, n, cpu int) (map[string]float64, time.Duration, error) {
	cmd := exec.Command(path, "-test.run", "^$", "-test.bench", bench, "-test.benchtime", strconv.Itoa(n)+"x",
		"-test.cpu", strconv.Itoa(cpu), "-test.count", "1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, 0, fmt.Errorf("%v: %s", err, out.Bytes())
	}
	res := map[string]float64{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		ns, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%q: %v", sc.Text(), err)
		}
		res[strings.TrimSuffix(f[0], "-"+strconv.Itoa(cpu))] = ns
	}
	if len(res) == 0 {
		return nil, 0, fmt.Errorf("no benchmark matched %q: %s", bench, out.Bytes())
	}
	st := cmd.ProcessState
	return res, st.UserTime() + st.SystemTime(), nil
}

func medians(s []sample) sample {
	med := func(f func(sample) float64) float64 {
		v := make([]float64, len(s))
		for i, x := range s {
			v[i] = f(x)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return sample{med(func(x sample) float64 { return x.ns }), med(func(x sample) float64 { return x.cpuNs })}
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	os.Exit(2)
}
