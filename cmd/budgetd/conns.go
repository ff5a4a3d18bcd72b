package main

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"

	"golang.org/x/net/netutil"
)

// connCap bounds the connections budgetd keeps open, so that a flood of
// connections cannot exhaust the file descriptors: the listener accepts at
// most max (netutil.LimitListener; more wait in the kernel's backlog). So
// that idle keep-alive connections cannot hold every slot and lock new
// clients out, whenever all slots are taken the connection idle longest is
// closed (a client reopens one when it needs it, as after an idle timeout).
type connCap struct {
	max  int
	mu   sync.Mutex
	open int
	idle []net.Conn // oldest first
}

func newConnCap(max int) *connCap { return &connCap{max: max} }

// listener limits ln to the cap.
func (cc *connCap) listener(ln net.Listener) net.Listener { return netutil.LimitListener(ln, cc.max) }

// track is the server's ConnState hook.
func (cc *connCap) track(c net.Conn, state http.ConnState) {
	cc.mu.Lock()
	switch state {
	case http.StateNew:
		cc.open++
	case http.StateIdle:
		cc.idle = append(cc.idle, c)
	case http.StateActive:
		cc.forget(c)
	case http.StateClosed, http.StateHijacked:
		cc.forget(c)
		cc.open--
	}
	var victim net.Conn
	if cc.open >= cc.max && len(cc.idle) > 0 {
		victim, cc.idle = cc.idle[0], cc.idle[1:]
	}
	cc.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
}

func (cc *connCap) forget(c net.Conn) {
	for i, x := range cc.idle {
		if x == c {
			cc.idle = append(cc.idle[:i], cc.idle[i+1:]...)
			return
		}
	}
}

// fdReserve is the file descriptors kept for the store's pool, the key and
// TLS files and the process itself.
const fdReserve = 128

// checkFDLimit warns when the cap does not fit in the file descriptors the
// process may open (Go has already raised the soft limit to the hard one).
func checkFDLimit(maxConns int, log *slog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if uint64(maxConns)+fdReserve > lim.Cur {
		log.Warn("--max-conns is close to the open-file limit: a flood of connections could leave none for the store; lower --max-conns or raise the limit (ulimit -n, LimitNOFILE=)",
			"max_conns", maxConns, "open_file_limit", lim.Cur)
	}
}
