package main

import "time"

// Keep-alive timing between this example's HTTP clients (a node's client
// of the store and of other nodes) and its servers (the store, a node's
// API). The two must agree, or a write fails for no fault of the store.
//
// A Go http.Server with ReadHeaderTimeout closes a connection that carries
// no request within that time of being accepted; a connection that did
// carry one waits for the next with IdleTimeout (or, unset, ReadTimeout,
// or forever). And a Go http.Transport may dial a connection for a request
// that is then served by another one coming free, leaving the new
// connection in its pool, never used. So a pooled connection can be one
// the server closes serverHeaderTimeout after accepting it. If the client
// picks it at that instant, before the server's FIN has reached the
// client's read loop (a loaded machine), the request goes out on a
// connection the server has just closed: the client reads EOF and cannot
// know whether the store saw the write, so it must not retry it — a write
// that reached the store and is sent again can overwrite a later write of
// the same leader, which the same epoch does not stop (seen: writes
// via n2 answered 502 "reused connection …, idle 5.022s …: EOF" while the
// store was up, idle just past the 5 s header timeout).
//
// The fix is at the root: a client never keeps a connection idle as long
// as the server may: clientIdleTimeout is well below serverHeaderTimeout
// and serverIdleTimeout, so the client drops an idle connection before the
// server can have closed it, and the race cannot happen.
const (
	// serverHeaderTimeout is the servers' ReadHeaderTimeout.
	serverHeaderTimeout = 5 * time.Second
	// serverIdleTimeout is the servers' IdleTimeout: how long a used
	// connection waits for its next request.
	serverIdleTimeout = 30 * time.Second
	// clientIdleTimeout is the clients' IdleConnTimeout: below both
	// server timeouts by a margin for scheduling delays.
	clientIdleTimeout = serverHeaderTimeout / 2
)
