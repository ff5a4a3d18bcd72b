package deploy

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/budgetd/budgetd/internal/testenv"
)

// tool returns the path of name, or skips t (fails it under CI) without it.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.Missing(t, name+" is not installed (scripts/install-deps installs it)")
	}
	return p
}

// buildBudgetd builds the server into dir and returns its path.
func buildBudgetd(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "budgetd")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/budgetd").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestUnit: systemd-analyze verifies deploy/budgetd.service (the binary at
// ExecStart built for it) and rates its sandbox "OK" or better.
func TestUnit(t *testing.T) {
	sa := tool(t, "systemd-analyze")
	dir := t.TempDir()
	bin := buildBudgetd(t, dir)
	unit, err := os.ReadFile("budgetd.service")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(unit, []byte("ExecStart=/usr/local/bin/budgetd\n")) {
		t.Fatal("the unit's ExecStart is not /usr/local/bin/budgetd as its comment says")
	}
	path := filepath.Join(dir, "budgetd.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/budgetd"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err := exec.Command(sa, "security", "--offline=true", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for budgetd.service: ([0-9.]+) (\w+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	// systemd rates 0-1.9 "SAFE", 2.0-4.9 "OK"; a unit without hardening is 9.6 "UNSAFE".
	if level, _ := strconv.ParseFloat(string(m[1]), 64); level >= 2.0 {
		t.Fatalf("exposure level %s %s, want below 2.0:\n%s", m[1], m[2], out)
	}
}

// TestImage builds the image with scripts/image (podman, its own storage),
// checks what it holds and how it runs — the static binary and three files
// of /etc, no shell, a non-root user, the health check — and, since these
// machines build images but cannot run containers, runs the binary taken
// out of the image: it serves /healthz and its own health command passes.
func TestImage(t *testing.T) {
	podman := tool(t, "podman")
	dir := t.TempDir()
	engineArgs := []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs"}
	pod := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(podman, append(slices.Clone(engineArgs), args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return out
	}
	t.Cleanup(func() {
		// vfs layers are plain directories: let podman remove its own.
		_ = exec.Command(podman, append(slices.Clone(engineArgs), "system", "reset", "--force")...).Run()
	})
	build := exec.Command("../scripts/image", "shiptest")
	build.Env = append(os.Environ(), "CONTAINER_ENGINE="+podman, "IMAGE_ENGINE_ARGS="+strings.Join(engineArgs, " "))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, out)
	}

	var cfg []struct {
		Config struct {
			User       string
			Entrypoint []string
		}
		Healthcheck *struct{ Test []string }
	}
	if err := json.Unmarshal(pod("image", "inspect", "budgetd:shiptest"), &cfg); err != nil || len(cfg) != 1 {
		t.Fatalf("image inspect: %v", err)
	}
	c, hc := cfg[0].Config, cfg[0].Healthcheck
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/budgetd"}) {
		t.Errorf("entrypoint %q", c.Entrypoint)
	}
	if hc == nil || len(hc.Test) < 3 || !slices.Equal(hc.Test[:3], []string{"CMD", "/budgetd", "health"}) {
		t.Fatalf("health check %+v, want CMD /budgetd health …", hc)
	}

	ctr := strings.TrimSpace(string(pod("create", "budgetd:shiptest")))
	var files []string
	tr := tar.NewReader(bytes.NewReader(pod("export", ctr)))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeDir {
			files = append(files, h.Name)
		}
	}
	slices.Sort(files)
	want := []string{"budgetd", "etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt"}
	if !slices.Equal(files, want) {
		t.Errorf("the image holds %q, want only %q (no shell)", files, want)
	}

	bin := filepath.Join(dir, "budgetd")
	pod("cp", ctr+":/budgetd", bin)
	if out, err := exec.Command("file", bin).CombinedOutput(); err == nil && !bytes.Contains(out, []byte("statically linked")) {
		t.Errorf("the binary is not static: %s", out)
	}
	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, bin, "--addr", "127.0.0.1:"+port)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = srv.Wait() })
	url := "http://127.0.0.1:" + port
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(url + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the image's binary did not serve /healthz within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	health := append([]string{}, hc.Test[2:]...)
	health = append(health, "--server", url) // the last --server wins: this run's port
	if out, err := exec.Command(bin, health...).CombinedOutput(); err != nil {
		t.Fatalf("the health check %q: %v\n%s", health, err, out)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
