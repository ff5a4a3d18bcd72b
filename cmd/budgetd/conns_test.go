package main

import (
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// closeConn is a net.Conn that only counts its closes.
type closeConn struct {
	net.Conn
	closed atomic.Int32
}

func (c *closeConn) Close() error { c.closed.Add(1); return nil }

// TestConnCapClosesIdleLongest: when every slot is taken, the connection
// idle longest is the one closed, one per new connection, however many
// times the others went idle and busy in between.
func TestConnCapClosesIdleLongest(t *testing.T) {
	const n = 100
	cc := newConnCap(n+1, 0) // every slot is taken at n+1 open
	conns := make([]*closeConn, n+3)
	for i := range conns {
		conns[i] = &closeConn{}
	}
	for _, c := range conns[:n] {
		cc.track(c, http.StateNew)
		cc.track(c, http.StateIdle)
	}
	// Every connection but 7 and 42 serves requests again, many times over,
	// in a changing order: 7 and 42 stay idle longest, 7 first.
	for round := range 5 {
		for i := range n {
			c := conns[(i*37+round)%n]
			if c == conns[7] || c == conns[42] {
				continue
			}
			cc.track(c, http.StateActive)
			cc.track(c, http.StateIdle)
		}
	}
	// Connection 9 closes while idle: it is no longer a candidate.
	cc.track(conns[9], http.StateClosed)
	cc.track(conns[n], http.StateNew) // takes the slot 9 left: one is still free
	for i, c := range conns[:n] {
		if c.closed.Load() != 0 {
			t.Fatalf("connection %d closed while a slot was free", i)
		}
	}
	for k, want := range []int{7, 42} {
		cc.track(conns[n+1+k], http.StateNew)
		cc.track(conns[want], http.StateClosed) // as net/http reports the close
		for i, c := range conns[:n] {
			if got := c.closed.Load(); (i == want || k == 1 && i == 7) != (got == 1) || got > 1 {
				t.Fatalf("after new connection %d: connection %d closed %d times (want only 7, then 42)", k+1, i, got)
			}
		}
	}
	if len(cc.idle) != n-3 || len(cc.idleOrder) > 2*len(cc.idle)+64+n {
		t.Errorf("%d idle connections kept in %d turns, want %d idle and the turns compacted", len(cc.idle), len(cc.idleOrder), n-3)
	}
}
