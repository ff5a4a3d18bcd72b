package main

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// connCap bounds the connections budgetd keeps open, so that a flood of
// connections cannot exhaust the file descriptors: its listeners — the
// API's and the gRPC one's — accept at most max between them (one slot per
// open connection, whichever listener took it; more wait in the kernel's
// backlog). So that idle keep-alive connections cannot hold every slot and
// lock new clients out, whenever all slots are taken the connection idle
// longest is closed (a client reopens one when it needs it, as after an
// idle timeout).
//
// When no connection is idle, the connection that has been open longest
// without sending a whole request header (a silent or slow client, or a
// TLS handshake that does not finish) is closed instead, once it has had
// pressureHeaderTimeout: under pressure that is the header deadline, not
// the usual 10 s, so that silent connections from a few addresses cannot
// keep everyone else waiting in the backlog.
//
// So that one client cannot take every slot with connections that send
// nothing (they hold a slot until the header timeout), each client address
// may hold at most perIP of them: a further connection from that address is
// closed as soon as it is accepted, without taking a slot.
//
// A gRPC connection (grpcListener) counts as an HTTP one that has not sent
// its request header until its HTTP/2 handshake (and TLS's) is done, so a
// silent one is shed the same way; after that it is busy for as long as it
// is open, never idle: a gateway keeps a few and multiplexes its calls over
// them. The gRPC server closes one that has had no call for --idle-timeout
// itself (listenGRPC), which frees its slot.
type connCap struct {
	max, perIP int
	grace      time.Duration // pressureHeaderTimeout
	slots      chan struct{} // a token per open connection, of every listener
	mu         sync.Mutex
	open       int
	// idle holds the idle connections, each with the number of its turn
	// at going idle; idleOrder lists turns oldest first, including turns
	// that have since ended (skipped lazily), so that a request's two
	// state changes cost a map write each, not a scan of every idle one.
	idle      map[net.Conn]uint64
	idleOrder []idleTurn
	turns     uint64
	// fresh holds the connections that have not sent a whole request
	// header yet, with when they were opened; order lists them oldest
	// first, including some that have since left fresh (skipped lazily).
	fresh map[net.Conn]time.Time
	order []net.Conn
	timer *time.Timer // armed to shed the oldest fresh connection when its grace ends
	byIP  map[string]int
}

// pressureHeaderTimeout is how long a connection may take to send its
// request header once every slot is taken (otherwise headerTimeout).
const pressureHeaderTimeout = time.Second

// headerTimeout is how long a connection may take to send its request
// header (HTTP) or to finish its handshake (gRPC).
const headerTimeout = 10 * time.Second

func newConnCap(max, perIP int) *connCap {
	return &connCap{max: max, perIP: perIP, grace: pressureHeaderTimeout, slots: make(chan struct{}, max),
		idle: map[net.Conn]uint64{}, fresh: map[net.Conn]time.Time{}, byIP: map[string]int{}}
}

// idleTurn is one time a connection went idle.
type idleTurn struct {
	c    net.Conn
	turn uint64
}

// listener limits ln to the cap, and each client address to perIP. The
// server that serves it reports its connections' states to track.
func (cc *connCap) listener(ln net.Listener) net.Listener {
	if cc.perIP > 0 {
		ln = &perIPListener{Listener: ln, cc: cc}
	}
	return &slotListener{Listener: ln, cc: cc, done: make(chan struct{})}
}

// grpcListener is listener for the gRPC server, which has no ConnState
// hook: its connections report their own states to track (grpcConn).
func (cc *connCap) grpcListener(ln net.Listener) net.Listener {
	return grpcListener{Listener: cc.listener(ln), cc: cc}
}

// slotListener hands out a connection only once it has one of the cap's
// slots for it; the connection gives it back when it closes. It takes the
// slot after accepting, not before as netutil.LimitListener does: the
// slots are shared, and a listener waiting for its next connection would
// hold a slot that the other listener's clients need. So each listener
// may hold one accepted connection beyond the cap while it waits for a
// slot (the file descriptors kept in reserve cover it).
type slotListener struct {
	net.Listener
	cc     *connCap
	done   chan struct{} // closed by Close: Accept waits no longer
	closed sync.Once
}

func (l *slotListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.cc.slots <- struct{}{}:
		return &slotConn{Conn: c, cc: l.cc}, nil
	case <-l.done:
		c.Close()
		return nil, net.ErrClosed
	}
}

func (l *slotListener) Close() error {
	err := l.Listener.Close()
	l.closed.Do(func() { close(l.done) })
	return err
}

// slotConn gives its slot back when it closes.
type slotConn struct {
	net.Conn
	cc   *connCap
	once sync.Once
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.cc.slots })
	return err
}

// grpcListener's connections tell the cap their states.
type grpcListener struct {
	net.Listener
	cc *connCap
}

func (l grpcListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &grpcConn{Conn: c, cc: l.cc}
	l.cc.track(gc, http.StateNew)
	return gc, nil
}

// grpcConn is a connection of the gRPC server: new (as an HTTP one before
// its request header) until its handshake is done, then active until it
// closes. The gRPC server sets a deadline on a connection for its
// handshake (grpc.ConnectionTimeout) and clears it when the handshake is
// over, whether it succeeded or not (a failed one is closed): the clearing
// is the sign (TestGRPCSilentConnectionsAreShed checks it still comes).
type grpcConn struct {
	net.Conn
	cc        *connCap
	handshook atomic.Bool
	closed    sync.Once
}

func (c *grpcConn) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	if t.IsZero() && c.handshook.CompareAndSwap(false, true) {
		c.cc.track(c, http.StateActive)
	}
	return err
}

func (c *grpcConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() { c.cc.track(c, http.StateClosed) })
	return err
}

// perIPListener closes, as soon as they are accepted, the connections of an
// address that already holds perIP.
type perIPListener struct {
	net.Listener
	cc *connCap
}

func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.cc.mu.Lock()
		ok := l.cc.byIP[ip] < l.cc.perIP
		if ok {
			l.cc.byIP[ip]++
		}
		l.cc.mu.Unlock()
		if ok {
			return &ipConn{Conn: c, cc: l.cc, ip: ip}, nil
		}
		c.Close()
	}
}

// ipConn gives its address's count back when it closes.
type ipConn struct {
	net.Conn
	cc   *connCap
	ip   string
	once sync.Once
}

func (c *ipConn) Close() error {
	c.once.Do(func() {
		c.cc.mu.Lock()
		if c.cc.byIP[c.ip]--; c.cc.byIP[c.ip] <= 0 {
			delete(c.cc.byIP, c.ip)
		}
		c.cc.mu.Unlock()
	})
	return c.Conn.Close()
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// track is the server's ConnState hook.
func (cc *connCap) track(c net.Conn, state http.ConnState) {
	cc.mu.Lock()
	switch state {
	case http.StateNew:
		cc.open++
		cc.fresh[c] = time.Now()
		cc.order = append(cc.order, c)
	case http.StateIdle:
		cc.turns++
		cc.idle[c] = cc.turns
		cc.idleOrder = append(cc.idleOrder, idleTurn{c, cc.turns})
	case http.StateActive:
		cc.forget(c)
		cc.forgetFresh(c)
	case http.StateClosed, http.StateHijacked:
		cc.forget(c)
		cc.forgetFresh(c)
		cc.open--
	}
	victim := cc.victim()
	cc.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
}

// victim picks the connection to close when every slot is taken: the one
// idle longest, else the one silent longest if it has had its grace (else
// a timer comes back when it has). Called with mu held.
func (cc *connCap) victim() net.Conn {
	if cc.open < cc.max {
		return nil
	}
	for len(cc.idleOrder) > 0 {
		v := cc.idleOrder[0]
		cc.idleOrder[0] = idleTurn{}
		cc.idleOrder = cc.idleOrder[1:]
		if turn, ok := cc.idle[v.c]; ok && turn == v.turn {
			delete(cc.idle, v.c)
			return v.c
		}
	}
	for len(cc.order) > 0 {
		v := cc.order[0]
		opened, ok := cc.fresh[v]
		if !ok { // sent its header or closed since
			cc.order = cc.order[1:]
			continue
		}
		if wait := cc.grace - time.Since(opened); wait > 0 {
			if cc.timer == nil {
				cc.timer = time.AfterFunc(wait, cc.shed)
			}
			return nil
		}
		cc.order = cc.order[1:]
		delete(cc.fresh, v)
		return v
	}
	return nil
}

// shed is the timer's: the oldest silent connection's grace has ended.
func (cc *connCap) shed() {
	cc.mu.Lock()
	cc.timer = nil
	victim := cc.victim()
	cc.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
}

// forgetFresh drops c from the connections yet to send a header; order
// is compacted when most of it is stale.
func (cc *connCap) forgetFresh(c net.Conn) {
	if _, ok := cc.fresh[c]; !ok {
		return
	}
	delete(cc.fresh, c)
	cc.order = compact(cc.order, len(cc.fresh), func(x net.Conn) bool { _, ok := cc.fresh[x]; return ok })
}

// forget drops c from the idle connections; idleOrder is compacted when
// most of it is stale.
func (cc *connCap) forget(c net.Conn) {
	if _, ok := cc.idle[c]; !ok {
		return
	}
	delete(cc.idle, c)
	cc.idleOrder = compact(cc.idleOrder, len(cc.idle), func(x idleTurn) bool { turn, ok := cc.idle[x.c]; return ok && turn == x.turn })
}

// compact returns order without its stale entries (live false) once most
// of it is stale: more than 64 entries and more than twice the live ones.
func compact[T any](order []T, live int, isLive func(T) bool) []T {
	if len(order) <= 64 || len(order) <= 2*live {
		return order
	}
	kept := order[:0]
	for _, x := range order {
		if isLive(x) {
			kept = append(kept, x)
		}
	}
	clear(order[len(kept):])
	return kept
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
