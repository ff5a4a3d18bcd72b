package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
)

// heapGoal is the garbage collector's current heap goal.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// residentBytes is the resident set of process pid (VmRSS).
func residentBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestGCFloorNotResident starts the budgetd binary with a 512 MiB floor
// and with none: once serving, the two are about the same size in memory,
// since the floor's pages are never touched.
func TestGCFloorNotResident(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "budgetd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rss := map[string]int64{}
	for _, floor := range []string{"0", "512"} {
		cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--gc-floor", floor)
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || !servingRE.MatchString(lines.Text()) {
			_ = cmd.Process.Kill()
			t.Fatalf("--gc-floor %s: start-up line %q", floor, lines.Text())
		}
		rss[floor] = residentBytes(t, cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	if rss["512"]-rss["0"] > 32<<20 {
		t.Errorf("resident at start: %d bytes with a 512 MiB floor, %d without: the floor's pages were touched", rss["512"], rss["0"])
	}
}

// TestGCFloor: while the floor is held the collector's goal is at least
// twice the floor, however small the live heap; released, it is gone.
func TestGCFloor(t *testing.T) {
	release := gcFloor(256)
	runtime.GC()
	if goal := heapGoal(); goal < 2*256<<20 {
		t.Errorf("heap goal with a 256 MiB floor: %d bytes, want at least %d", goal, 2*256<<20)
	}
	release()
	runtime.GC()
	runtime.GC()
	if goal := heapGoal(); goal >= 2*256<<20 {
		t.Errorf("heap goal after release: %d bytes, the floor is still held", goal)
	}
	gcFloor(0)() // off: nothing to hold
}

// TestRunHoldsGCFloor: budgetd serving holds the floor --gc-floor names
// (64 MiB by default), and lets it go when it stops.
func TestRunHoldsGCFloor(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		min  uint64
	}{
		{nil, nil, 2 * 64 << 20},
		{nil, map[string]string{"BUDGETD_GC_FLOOR": "300"}, 2 * 300 << 20},
		{[]string{"--gc-floor", "200"}, map[string]string{"BUDGETD_GC_FLOOR": "300"}, 2 * 200 << 20},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var stdout syncBuffer
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, append([]string{"--addr", "127.0.0.1:0"}, tc.args...), env(tc.env), &stdout, io.Discard)
		}()
		waitURL(t, &stdout, done)
		runtime.GC()
		if goal := heapGoal(); goal < tc.min {
			t.Errorf("%v %v: heap goal %d while serving, want at least %d", tc.args, tc.env, goal, tc.min)
		}
		stopRun(t, cancel, done)
	}
	runtime.GC()
	runtime.GC()
	if goal := heapGoal(); goal >= 2*200<<20 {
		t.Errorf("heap goal %d after budgetd stopped: the floor is still held", goal)
	}
	for _, v := range []string{"-1", "many", "1048577"} {
		_, _, err := parseConfig([]string{"--gc-floor", v}, env(nil), io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--gc-floor") {
			t.Errorf("--gc-floor %s: %v, want a usage error naming it", v, err)
		}
	}
	if cfg, _, err := parseConfig([]string{"--gc-floor", "0"}, env(nil), io.Discard); err != nil || cfg.gcFloorMiB != 0 {
		t.Errorf("--gc-floor 0: %+v %v", cfg, err)
	}
}
