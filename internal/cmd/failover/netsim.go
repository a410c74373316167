package main

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hostLayer is a loopback TCP raft.StreamLayer that can play the death of
// the host it runs on. Both clusters use it, through
// raft.NewNetworkTransportWithConfig with the same settings as
// transport.NewTCP (pool 3, timeout 10 s), so the faults are identical.
//
//   - freeze: the host is gone (power cut, kernel panic, cable pulled).
//     Every connection stays open but goes silent: what peers send is
//     swallowed, nothing is answered, nothing is sent. Its own dials hang.
//     Peers learn nothing from TCP; they must time out.
//   - Close (raft shutdown with the transport): the process died while the
//     host stays up. The kernel closes every connection and the port
//     refuses new ones at once.
type hostLayer struct {
	ln net.Listener

	mu     sync.Mutex
	frozen bool
	conns  map[*hostConn]struct{}
	closed bool
	done   chan struct{}
}

var _ raft.StreamLayer = (*hostLayer)(nil)

func newHostLayer(addr string) (*hostLayer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &hostLayer{ln: ln, conns: make(map[*hostConn]struct{}), done: make(chan struct{})}, nil
}

// noPipeline is a NetworkTransport without raft's pipelined replication,
// which transport.NewTCP turns off too (raft v1.7.2's pipeline can deadlock;
// see transport/tcp.go). The raw raft cluster keeps it: it is raw raft.
type noPipeline struct{ *raft.NetworkTransport }

func (noPipeline) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// newHostTransport builds a NetworkTransport over a hostLayer bound to addr.
func newHostTransport(addr string) (*raft.NetworkTransport, *hostLayer, error) {
	hl, err := newHostLayer(addr)
	if err != nil {
		return nil, nil, err
	}
	nt := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  hl,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hclog.NewNullLogger(),
	})
	return nt, hl, nil
}

func (h *hostLayer) Accept() (net.Conn, error) {
	c, err := h.ln.Accept()
	if err != nil {
		return nil, err
	}
	return h.track(c)
}

func (h *hostLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	h.mu.Lock()
	frozen := h.frozen
	h.mu.Unlock()
	if frozen { // a dead host sends no SYN
		select {
		case <-time.After(timeout):
		case <-h.done:
		}
		return nil, errors.New("failover: host is down")
	}
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	return h.track(c)
}

func (h *hostLayer) track(c net.Conn) (net.Conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		_ = c.Close()
		return nil, errors.New("failover: stream layer closed")
	}
	hc := &hostConn{Conn: c, h: h, frozen: h.frozen}
	h.conns[hc] = struct{}{}
	return hc, nil
}

// freeze makes the host go silent (see hostLayer).
func (h *hostLayer) freeze() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.frozen = true
	for c := range h.conns {
		c.mu.Lock()
		c.frozen = true
		c.mu.Unlock()
	}
}

// Close closes the listener and every connection, as the kernel does when a
// process dies.
func (h *hostLayer) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.done)
	conns := make([]*hostConn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	err := h.ln.Close()
	for _, c := range conns {
		_ = c.Conn.Close()
	}
	return err
}

func (h *hostLayer) Addr() net.Addr { return h.ln.Addr() }

type hostConn struct {
	net.Conn
	h      *hostLayer
	mu     sync.Mutex
	frozen bool
}

func (c *hostConn) isFrozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen
}

// Read swallows everything that arrives once the host is frozen and blocks
// until the connection is closed.
func (c *hostConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if !c.isFrozen() {
			return n, err
		}
		if err != nil {
			return 0, err
		}
	}
}

// Write drops everything once the host is frozen.
func (c *hostConn) Write(b []byte) (int, error) {
	if c.isFrozen() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *hostConn) Close() error {
	c.h.mu.Lock()
	delete(c.h.conns, c)
	c.h.mu.Unlock()
	return c.Conn.Close()
}
