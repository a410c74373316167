package main

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// serverErrorLog is an http.Server's ErrorLog that writes net/http's own
// lines into the process's slog stream, in its format, instead of the
// standard logger's: a failed TLS handshake ("http: TLS handshake error
// from …": a client without the cluster CA's certificate, a port scanner, a
// load balancer's health check) at Debug, since its client is told; every
// other line (a panic in a handler, an accept error) at Warn.
func serverErrorLog(l *slog.Logger, server string) *log.Logger {
	return log.New(serverLogWriter{l: l.With("server", server)}, "", 0)
}

type serverLogWriter struct{ l *slog.Logger }

func (w serverLogWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, "\n"))
	lv := slog.LevelWarn
	if bytes.Contains(p, []byte("TLS handshake error")) {
		lv = slog.LevelDebug
	}
	w.l.Log(context.Background(), lv, "http server: "+msg)
	return len(p), nil
}
