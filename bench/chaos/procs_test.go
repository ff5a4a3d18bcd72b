package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// TestRedisTornScript: a kill -9 can tear the AOF inside the MULTI/EXEC
// block of one script's writes (Linux ends a write early at a page when
// SIGKILL arrives). Restarted the way the chaos runs restart it, Redis must
// come back without any of that script's writes, and stay so across the
// next restart too: Redis 7.0 with aof-load-truncated yes (its default)
// leaves the block's MULTI open, and the next load applies a part of the
// script (here: a history entry without its level).
func TestRedisTornScript(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server not found: run scripts/install-deps")
	}
	ctx := context.Background()
	s, err := newRedis(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	restart := func() *goredis.Client {
		t.Helper()
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		c := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port)})
		t.Cleanup(func() { c.Close() })
		return c
	}
	kill := func() {
		t.Helper()
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	get := func(c *goredis.Client, k string) string { return c.Get(ctx, k).Val() }

	c := restart()
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	kill()
	incr, err := filepath.Glob(filepath.Join(s.dir, "appendonlydir", "*.incr.aof"))
	if err != nil || len(incr) != 1 {
		t.Fatalf("incr AOF files: %v %v", incr, err)
	}
	// A script's writes as Redis logs them, torn in its second command.
	f, err := os.OpenFile(incr[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := "*1\r\n$5\r\nMULTI\r\n" +
		"*3\r\n$3\r\nSET\r\n$4\r\nhist\r\n$5\r\nentry\r\n" +
		"*3\r\n$3\r\nSET\r\n$5\r\nlevel\r\n$2\r\n5"
	if _, err := f.WriteString(torn); err != nil {
		t.Fatal(err)
	}
	f.Close()

	c = restart()
	if h, l := get(c, "hist"), get(c, "level"); h != "" || l != "" {
		t.Fatalf("after the torn script: hist %q level %q, want neither", h, l)
	}
	// The next script's writes: a MULTI/EXEC block of their own.
	if err := c.Eval(ctx, "redis.call('SET', 'after', '2'); redis.call('SET', 'after2', '3')", nil).Err(); err != nil && err != goredis.Nil {
		t.Fatal(err)
	}
	kill()
	c = restart()
	if h, l := get(c, "hist"), get(c, "level"); h != "" || l != "" {
		t.Fatalf("one restart later: hist %q level %q, want neither: a part of the torn script came back", h, l)
	}
	if b, a, a2 := get(c, "before"), get(c, "after"), get(c, "after2"); b != "1" || a != "2" || a2 != "3" {
		t.Fatalf("before %q after %q %q, want 1, 2 and 3: acknowledged writes were lost", b, a, a2)
	}
}
