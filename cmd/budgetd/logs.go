package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	budgethttp "github.com/budgetd/budgetd/internal/http"
)

// newLogger is the process's logger in the format and level asked for.
func newLogger(cfg config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.logLevel))
	return newLoggerAt(cfg.logFormat, level, w)
}

// newLoggerAt is a logger in format (text or json) that writes the
// records at level or above to w, durations with their unit
// (durationWithUnit).
func newLoggerAt(format string, level slog.Level, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationWithUnit}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// durationWithUnit writes a time.Duration as time.Duration.String does
// ("1.5ms", "10s", "1h0m0s"): in JSON a string, instead of slog's JSON
// default of a bare number of nanoseconds. The text handler wrote that
// already, so text lines do not change (docs/operations.md "Logs").
func durationWithUnit(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// accessLogFlushTimeout bounds how long budgetd waits on exit for the
// access-log lines still buffered to be written.
const accessLogFlushTimeout = 5 * time.Second

// newAccessLog is the access log, in the format of the process's logger.
func newAccessLog(cfg config, w io.Writer) *budgethttp.AccessLog {
	if cfg.logFormat == "json" {
		return budgethttp.NewAccessLog(w, budgethttp.AccessJSON)
	}
	return budgethttp.NewAccessLog(w, budgethttp.AccessText)
}

// closeAccessLog writes the access-log lines still buffered, waiting at
// most accessLogFlushTimeout for a stuck stderr.
func closeAccessLog(a *budgethttp.AccessLog, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), accessLogFlushTimeout)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		log.Warn("access log not flushed", "err", err)
	}
}
