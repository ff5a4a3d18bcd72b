package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// floodMethods sends n requests with invented method names and reports how
// much budgetd grew and whether any of them became a metrics label.
func floodMethods(ctx context.Context, a *api, b *budgetd, n int) (row result, err error) {
	row.name = "flood: invented methods"
	before := b.rss()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				if _, err := a.do(ctx, fmt.Sprintf("M%d", i), "/healthz", "", nil); err == nil {
					row.calls++ // approximate; read only for the report
				}
			}
		})
	}
	wg.Wait()
	row.calls = int64(n)
	grew := b.rss() - before
	row.rssGrowth = grew
	m, err := a.must(ctx, 200, "GET", "/metrics", "")
	if err != nil {
		return row, err
	}
	if c := strings.Count(string(m), `method="M`); c > 0 {
		row.fail("%d metric series carry an invented method", c)
	}
	if grew > 64<<20 {
		row.fail("budgetd grew by %d MiB", grew>>20)
	}
	row.note = fmt.Sprintf("%d requests, RSS %+d MiB", n, grew>>20)
	return row, nil
}

// floodIdempotency sends n cost-0 fillups, each with a fresh 255-byte
// Idempotency-Key, and reports how much budgetd grew. The memory store
// keeps at most an estimated 256 MiB of records by default; the process may
// hold up to about twice its live heap (Go's GC target, GOGC=100), so the
// bound on its growth is 768 MiB.
func floodIdempotency(ctx context.Context, a *api, b *budgetd, n int, bound int64) (row result, err error) {
	row.name = "flood: fresh Idempotency-Keys"
	if err := a.putLimit(ctx, "chaos-idem", "10", false); err != nil {
		return row, err
	}
	before := b.rss()
	var next, refused atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				key := fmt.Sprintf("%0255d", i)
				ans, err := a.do(ctx, "POST", "/v1/limits/chaos-idem/buckets/k/fillup", `{"cost":"0"}`, map[string]string{"Idempotency-Key": key})
				if err == nil && ans.status != 200 {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	row.calls = int64(n)
	grew := b.rss() - before
	row.rssGrowth = grew
	if bound > 0 && grew > bound {
		row.fail("budgetd grew by %d MiB, bound %d MiB", grew>>20, bound>>20)
	}
	// One caller's flood fills its share of the records, never the others':
	// a client on another address is served with a fresh key.
	if status, err := keyedFrom(ctx, b, net.IPv4(127, 0, 0, 3)); err != nil || status != 200 {
		row.fail("after the flood a fresh key from another address got %d (%v)", status, err)
	}
	row.note = fmt.Sprintf("%d keys, %d refused when full, RSS %+d MiB", n, refused.Load(), grew>>20)
	return row, nil
}

// floodConnections opens n idle connections from 127.0.0.2 and checks that
// a client on 127.0.0.1 is still answered within two seconds.
func floodConnections(ctx context.Context, b *budgetd, n int) (row result, err error) {
	row.name = "flood: idle connections"
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(n+8192) {
		lim.Cur = min(lim.Max, uint64(n+8192))
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", b.port)
	d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	row.calls = int64(len(conns))
	fresh := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := fresh.Get("http://" + addr + "/healthz")
	took := time.Since(start)
	if err != nil {
		row.fail("a new client was not answered with %d idle connections open: %v", len(conns), err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != 200 {
			row.fail("a new client got %d", resp.StatusCode)
		}
	}
	row.note = fmt.Sprintf("%d idle connections held, a new client answered in %s", len(conns), took.Round(time.Millisecond))
	return row, nil
}

// floodSilent opens per connections that send nothing from each of addrs
// addresses (127.0.0.10 on), under the per-address cap but together past
// the connection cap, and checks that a client on 127.0.0.1 queued behind
// them is answered well within the 10 s header timeout: once the cap is
// reached, connections that have sent no header are shed after a second.
func floodSilent(ctx context.Context, b *budgetd, addrs, per int) (row result, err error) {
	row.name = "flood: silent connections"
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(addrs*per+8192) {
		lim.Cur = min(lim.Max, uint64(addrs*per+8192))
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", b.port)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range addrs {
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i))}}
		for range per {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
	}
	row.calls = int64(len(conns))
	const bound = 5 * time.Second
	fresh := &http.Client{Timeout: bound, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := fresh.Get("http://" + addr + "/healthz")
	took := time.Since(start)
	if err != nil {
		row.fail("a new client was not answered within %s behind %d silent connections from %d addresses: %v", bound, len(conns), addrs, err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != 200 {
			row.fail("a new client got %d", resp.StatusCode)
		}
	}
	row.note = fmt.Sprintf("%d silent connections from %d addresses, a new client answered in %s", len(conns), addrs, took.Round(time.Millisecond))
	return row, nil
}
