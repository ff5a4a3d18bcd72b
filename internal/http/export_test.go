package http

import (
	"io"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"
)

// Routes lists the API's routes, for the OpenAPI test.
func Routes() []*echo.Route {
	e := echo.New()
	(&server{log: slog.Default()}).routes(e)
	return e.Routes()
}

// Flush returns once every line a logged before the call is written.
func (a *AccessLog) Flush() { a.flush() }

// NewAccessLogLimit is NewAccessLog holding at most limit bytes of lines
// for the writer.
func NewAccessLogLimit(w io.Writer, format AccessFormat, limit int) *AccessLog {
	return newAccessLog(w, format, limit)
}

// AccessLine is one access-log line for the format tests and benchmarks.
type AccessLine = accessLine

// NewAccessLine is the line observe writes for these fields.
func NewAccessLine(t time.Time, method, route string, status int, d time.Duration, requestID any, key, path string, withPath bool) *AccessLine {
	id, ok := requestID.(string)
	return &accessLine{time: t, method: method, route: route, status: status, duration: d, requestID: id, hasID: ok, key: key, path: path, withPath: withPath}
}

// Log queues l as observe does.
func (a *AccessLog) Log(l *AccessLine) { a.log(l) }

// Dropped is the value of budgetd_access_log_dropped_total.
func (a *AccessLog) Dropped() float64 {
	var m dto.Metric
	if err := a.dropped.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// NewRequestID is newRequestID, for TestNewRequestIDsUnique.
var NewRequestID = newRequestID

// WithTraceID sets the trace id a traced request's line carries.
func (l *AccessLine) WithTraceID(id [16]byte) *AccessLine {
	l.traceID = id
	return l
}
