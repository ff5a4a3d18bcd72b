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
// records at level or above to w.
func newLoggerAt(format string, level slog.Level, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
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
