package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The load generator shares the CPUs with the service it measures, so what
// it spends on a call lowers the service's throughput. net/http's client
// hands each request and answer between the caller's goroutine and the
// connection's two: 64 to 82 µs of CPU a call on this 2-core machine
// against MySQL, where a worker's own connection, the request written in
// one write and the answer read in place, takes 38 to 52 (docs/mysql.md
// "Benchmark"; wrk, in C, about 20). It serves plain http:// URLs;
// https:// goes through net/http.

// rawIdle is how long a connection may have been idle before a call dials
// a new one rather than risk a server that closed it meanwhile: a request
// sent on such a connection fails, and a POST is not sent twice.
const rawIdle = 5 * time.Second

// rawConn is a worker's connection of its own.
type rawConn struct {
	c    net.Conn
	br   *bufio.Reader
	wb   []byte
	used time.Time
}

// rawConns is every connection the loader's workers opened, to close at the
// end of the run.
type rawConns struct {
	mu    sync.Mutex
	conns map[*rawConn]bool
}

func (rc *rawConns) add(c *rawConn) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.conns == nil {
		rc.conns = map[*rawConn]bool{}
	}
	rc.conns[c] = true
}

func (rc *rawConns) drop(c *rawConn) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.conns, c)
	c.c.Close()
}

// closeAll closes every connection still open.
func (rc *rawConns) closeAll() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for c := range rc.conns {
		c.c.Close()
	}
	clear(rc.conns)
}

// callRaw is call on the worker's own connection: u must start with
// w.l.rawBase (scheme and host of --url).
func (w *worker) callRaw(ctx context.Context, method, u string, body []byte) (int, error) {
	target := strings.TrimPrefix(u, w.l.rawBase)
	if target == "" || target[0] != '/' {
		target = "/" + target
	}
	if w.raw != nil && time.Since(w.raw.used) > rawIdle {
		w.l.raws.drop(w.raw)
		w.raw = nil
	}
	if w.raw == nil {
		d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
		c, err := d.DialContext(ctx, "tcp", w.l.rawHost)
		if err != nil {
			return 0, err
		}
		w.raw = &rawConn{c: c, br: bufio.NewReaderSize(c, 8<<10)}
		w.l.raws.add(w.raw)
	}
	rc := w.raw
	deadline := time.Now().Add(w.l.cfg.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// The end of the run (ctx) ends a call in flight, as net/http's would.
	stop := context.AfterFunc(ctx, func() { rc.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	status, keep, err := rc.roundTrip(deadline, method, w.l.rawHost, target, body, w)
	rc.used = time.Now()
	if err != nil || !keep {
		w.l.raws.drop(rc)
		w.raw = nil
	}
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return status, err
}

// roundTrip writes one request and reads its answer's body into w.buf; keep
// is false when the connection must not be used again.
func (rc *rawConn) roundTrip(deadline time.Time, method, host, target string, body []byte, w *worker) (status int, keep bool, err error) {
	if err := rc.c.SetDeadline(deadline); err != nil {
		return 0, false, err
	}
	b := append(rc.wb[:0], method...)
	b = append(b, ' ')
	b = append(b, target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	if body != nil {
		b = append(b, "Content-Type: application/json\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	b = append(b, body...)
	rc.wb = b
	if _, err := rc.c.Write(b); err != nil {
		return 0, false, err
	}
	res, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		return 0, false, err
	}
	w.buf.Reset()
	_, err = w.buf.ReadFrom(res.Body)
	res.Body.Close()
	return res.StatusCode, err == nil && !res.Close, err
}
