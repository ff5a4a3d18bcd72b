package http

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// AccessFormat is the format of the access-log lines: the same bytes as
// slog's TextHandler or JSONHandler would write for them.
type AccessFormat int

// The access-log formats.
const (
	AccessText AccessFormat = iota // slog.TextHandler's key=value
	AccessJSON                     // slog.JSONHandler's one object per line
)

// accessLogDelay is how long the writer lets lines gather after the first
// one before it writes them: waking it for each line would cost a request
// more than formatting the line does.
const accessLogDelay = 10 * time.Millisecond

// accessLogLimit bounds the bytes of lines waiting for the writer: about
// 7,000 lines of 150 bytes. A line that does not fit is dropped.
const accessLogLimit = 1 << 20

// AccessLog writes the access log, one line per request, without making a
// request wait for the writer: each line is formatted by hand (no slog
// record, attributes or reflection, no allocation) and appended to a
// bounded buffer, which one goroutine hands to the writer in batches of
// whole lines. When the buffer is full — the writer is slow or stuck — the
// line is dropped and counted in budgetd_access_log_dropped_total. Close
// writes what is left.
type AccessLog struct {
	w      io.Writer
	format AccessFormat
	limit  int

	mu      sync.Mutex
	pending []byte // whole lines waiting for the writer

	spare   []byte        // the drainer's other buffer, swapped with pending
	wake    chan struct{} // a line is pending (capacity 1)
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once

	dropped prometheus.Counter

	stamp atomic.Pointer[secondStamp] // the text time of the latest second logged
}

// secondStamp is slog's text time of one second in one location, split
// around the milliseconds: "2026-11-25T16:09:52" and "Z" (or "+01:00").
// Formatting the time was half the cost of a text line; a server logs
// many lines per second, so the two parts are kept for the second and only
// the milliseconds are written per line.
type secondStamp struct {
	unix       int64
	loc        *time.Location
	date, zone []byte
}

// NewAccessLog starts an access log writing to w in format. Close it to
// write the lines still buffered.
func NewAccessLog(w io.Writer, format AccessFormat) *AccessLog {
	return newAccessLog(w, format, accessLogLimit)
}

func newAccessLog(w io.Writer, format AccessFormat, limit int) *AccessLog {
	a := &AccessLog{
		w: w, format: format, limit: limit,
		wake:    make(chan struct{}, 1),
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "budgetd_access_log_dropped_total",
			Help: "Access-log lines dropped because the log's writer (stderr) could not keep up and the buffer of lines waiting for it was full.",
		}),
	}
	go a.drain()
	return a
}

// Close stops the access log after writing every line buffered so far, or
// returns an error when ctx ends first (a writer that does not return).
func (a *AccessLog) Close(ctx context.Context) error {
	a.stopped.Do(func() { close(a.stop) })
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("access log: lines left unwritten: %w", ctx.Err())
	}
}

// flush returns once every line logged before it was called is written.
func (a *AccessLog) flush() {
	ack := make(chan struct{})
	select {
	case a.flushes <- ack:
		<-ack
	case <-a.done:
	}
}

// drain is the one goroutine that writes: woken by a first line, it lets
// more gather for accessLogDelay, then writes them all in one call.
func (a *AccessLog) drain() {
	defer close(a.done)
	gather := time.NewTimer(accessLogDelay)
	gather.Stop()
	for {
		select {
		case <-a.wake:
			gather.Reset(accessLogDelay)
			select {
			case <-gather.C:
			case <-a.stop:
				gather.Stop()
			}
			a.writePending()
		case ack := <-a.flushes:
			a.writePending()
			close(ack)
		case <-a.stop:
			a.writePending()
			return
		}
	}
}

// writePending swaps the buffers and writes the lines taken. A write error
// is ignored, as slog ignores it: there is nowhere else to report it.
func (a *AccessLog) writePending() {
	a.mu.Lock()
	batch := a.pending
	a.pending = a.spare
	a.mu.Unlock()
	if len(batch) > 0 {
		_, _ = a.w.Write(batch)
	}
	a.spare = batch[:0]
}

// accessLine is what one access-log line says.
type accessLine struct {
	time      time.Time
	method    string
	route     string
	status    int
	duration  time.Duration
	requestID string
	hasID     bool // without it the id is written as slog writes a nil one
	key       string
	path      string
	withPath  bool
	traceID   trace.TraceID // written when valid: the request's span is in a trace
}

// log formats l and queues it for the writer, or drops it if the buffer is
// full. It never waits for the writer.
func (a *AccessLog) log(l *accessLine) {
	var arr [512]byte
	line := arr[:0]
	if a.format == AccessJSON {
		line = appendJSONLine(line, l)
	} else {
		line = appendTextLine(line, l, a.textTime(l.time))
	}
	a.mu.Lock()
	if len(a.pending)+len(line) > a.limit {
		a.mu.Unlock()
		a.dropped.Inc()
		return
	}
	wasEmpty := len(a.pending) == 0
	a.pending = append(a.pending, line...)
	a.mu.Unlock()
	if wasEmpty { // otherwise the drainer was woken already
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// textTime is the stamp of t's second in t's location: the latest one, or
// a new one that replaces it. The stamps are never changed once made, so
// requests may share them without a lock.
func (a *AccessLog) textTime(t time.Time) *secondStamp {
	unix, loc := t.Unix(), t.Location()
	if s := a.stamp.Load(); s != nil && s.unix == unix && s.loc == loc {
		return s
	}
	full := appendRFC3339Millis(nil, t.Truncate(time.Second))
	dot := bytes.LastIndexByte(full, '.') // the zone holds no dot
	s := &secondStamp{unix: unix, loc: loc, date: full[:dot], zone: full[dot+len(".000"):]}
	a.stamp.Store(s)
	return s
}

// appendTextLine appends l as slog.TextHandler writes it; at is the stamp
// of l.time's second.
func appendTextLine(b []byte, l *accessLine, at *secondStamp) []byte {
	b = append(b, "time="...)
	b = append(b, at.date...)
	ms := l.time.Nanosecond() / int(time.Millisecond)
	b = append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	b = append(b, at.zone...)
	b = append(b, " level=INFO msg=request method="...)
	b = appendTextString(b, l.method)
	b = append(b, " route="...)
	b = appendTextString(b, l.route)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(l.status), 10)
	b = append(b, " duration="...)
	b = append(b, l.duration.String()...)
	b = append(b, " request_id="...)
	if l.hasID {
		b = appendTextString(b, l.requestID)
	} else {
		b = append(b, "<nil>"...)
	}
	b = append(b, " key="...)
	b = appendTextString(b, l.key)
	if l.withPath {
		b = append(b, " path="...)
		b = appendTextString(b, l.path)
	}
	if l.traceID.IsValid() {
		b = append(b, " trace_id="...)
		b = appendTraceID(b, l.traceID)
	}
	return append(b, '\n')
}

// appendJSONLine appends l as slog.JSONHandler writes it.
func appendJSONLine(b []byte, l *accessLine) []byte {
	b = append(b, `{"time":"`...)
	b = l.time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"INFO","msg":"request","method":`...)
	b = appendJSONString(b, l.method)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, l.route)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.status), 10)
	b = append(b, `,"duration":"`...)
	b = append(b, l.duration.String()...)
	b = append(b, '"')
	b = append(b, `,"request_id":`...)
	if l.hasID {
		b = appendJSONString(b, l.requestID)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"key":`...)
	b = appendJSONString(b, l.key)
	if l.withPath {
		b = append(b, `,"path":`...)
		b = appendJSONString(b, l.path)
	}
	if l.traceID.IsValid() {
		b = append(b, `,"trace_id":"`...)
		b = appendTraceID(b, l.traceID)
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

// appendTraceID appends id as 32 lowercase hex digits, as traceparent
// writes it.
func appendTraceID(b []byte, id trace.TraceID) []byte {
	return hex.AppendEncode(b, id[:])
}

// appendRFC3339Millis is slog's text time: RFC 3339 with exactly three
// digits of milliseconds.
func appendRFC3339Millis(b []byte, t time.Time) []byte {
	const prefixLen = len("2006-01-02T15:04:05.000")
	n := len(b)
	// RFC3339Nano trims trailing zeros: a tenth of a millisecond keeps
	// four digits, and the fourth is dropped.
	t = t.Truncate(time.Millisecond).Add(time.Millisecond / 10)
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b[:n+prefixLen], b[n+prefixLen+1:]...)
}

// appendTextString appends s bare, or quoted when slog's text format
// quotes it.
func appendTextString(b []byte, s string) []byte {
	if textNeedsQuoting(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

// textNeedsQuoting is slog's rule: quote the empty string, space, '=',
// '"', control bytes and runes that are not printable or are spaces.
func textNeedsQuoting(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c != '\\' && (c == ' ' || c == '=' || !jsonSafe(c)) {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}

// jsonSafe reports whether the ASCII byte c stands for itself in a JSON
// string (encoding/json's safeSet).
func jsonSafe(c byte) bool { return c >= 0x20 && c != '"' && c != '\\' }

// appendJSONString appends s as a JSON string the way slog escapes it.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe(c) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
