package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// flood holds up to n connections open to addr at all times: each flooder
// connects, writes first (nothing, one byte, or the first bytes of a TLS
// record that never completes), then waits, and reconnects 20 ms after the
// server closed it. stop closes everything and waits.
type flood struct {
	wg     sync.WaitGroup
	cancel context.CancelFunc
	mu     sync.Mutex
	dials  int
}

func startFlood(t *testing.T, addr string, n int) *flood {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &flood{cancel: cancel}
	firsts := [][]byte{nil, {0}, {0x16, 0x03, 0x01, 0x02, 0x00, 0x01}}
	for i := range n {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			var d net.Dialer
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					f.mu.Lock()
					f.dials++
					f.mu.Unlock()
					if first := firsts[i%len(firsts)]; first != nil {
						_, _ = c.Write(first)
					}
					stop := context.AfterFunc(ctx, func() { _ = c.Close() })
					_, _ = c.Read(make([]byte, 64)) // until the server closes it (or stop)
					stop()
					_ = c.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond): // reconnect pace
				}
			}
		}()
	}
	return f
}

func (f *flood) stop() int {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials
}

// TestInboundFloodKeepsCluster floods every node of a three-node cluster
// with connections that stay idle, that send one byte and go idle, and
// (with TLS) that never finish their handshake — 64 per node, against a cap
// of 32, reconnecting as soon as they are closed — while the cluster must
// keep its leader, then elect a new one twice (a leadership transfer and a
// leader shut down), each time within the usual wait. Afterwards every
// flood connection and goroutine is released.
func TestInboundFloodKeepsCluster(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain TCP", true: "mutual TLS"}[withTLS], func(t *testing.T) {
			ca := newCA(t, "cluster")
			cfg := func(name string) Config {
				c := Config{MaxInbound: 32, HandshakeTimeout: 300 * time.Millisecond, IdleTimeout: 2 * time.Second, Timeout: 2 * time.Second}
				if withTLS {
					c.TLS = ca.mutual(t, name)
				}
				return c
			}
			before := runtime.NumGoroutine()
			trs := []Transport{newTestTCP(t, cfg("n0")), newTestTCP(t, cfg("n1")), newTestTCP(t, cfg("n2"))}
			nodes := startCluster(t, 200*time.Millisecond, trs...)
			leader, term := waitLeader(t, nodes)

			var floods []*flood
			for _, tr := range trs {
				floods = append(floods, startFlood(t, string(tr.LocalAddr()), 64))
			}
			waitFor(t, 10*time.Second, "every node to be at its cap of inbound connections", func() bool {
				for _, tr := range trs {
					if s, _ := Inbound(tr); s.Open < 32 {
						return false
					}
				}
				return true
			})
			// Keeping the leader: a few election timeouts with no change.
			hold := time.Now().Add(time.Second)
			for time.Now().Before(hold) {
				if got, gotTerm := waitLeader(t, nodes); got != leader || gotTerm != term {
					t.Logf("leader changed under the flood: %s term %d -> %s term %d", leader.id, term, got.id, gotTerm)
					leader, term = got, gotTerm
				}
				time.Sleep(10 * time.Millisecond) // sampling interval
			}
			// Electing: a transfer, then the leader shut down.
			waitFor(t, 10*time.Second, "a new leader after a transfer", func() bool {
				if leader.r.State() == raft.Leader {
					if err := leader.r.LeadershipTransfer().Error(); err != nil {
						t.Logf("leadership transfer under the flood: %v", err)
					}
				}
				for _, n := range nodes {
					if n.r.State() == raft.Leader && n.r.CurrentTerm() > term {
						return true
					}
				}
				return false
			})
			leader, term = waitLeader(t, nodes)
			if err := leader.r.Shutdown().Error(); err != nil {
				t.Fatal(err)
			}
			next, _ := waitLeader(t, nodes, leader)
			if err := next.r.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
				t.Fatalf("apply under the flood: %v", err)
			}

			var evicted uint64
			for i, f := range floods {
				dials := f.stop()
				s, _ := Inbound(trs[i])
				evicted += s.Evicted
				t.Logf("%s: %d flood connections; %+v", nodes[i].id, dials, s)
			}
			if evicted == 0 {
				t.Error("no connection was evicted: the flood never reached the cap")
			}
			// Released: only the cluster's own connections stay open.
			waitFor(t, 10*time.Second, "the flood's connections to be released", func() bool {
				for i, tr := range trs {
					if nodes[i] == leader {
						continue
					}
					if s, _ := Inbound(tr); s.Open > 12 {
						return false
					}
				}
				return true
			})
			for _, n := range nodes {
				_ = n.r.Shutdown().Error()
			}
			for _, tr := range trs {
				_ = tr.Close()
				if s, _ := Inbound(tr); s.Open != 0 {
					t.Errorf("%d inbound connections open after Close", s.Open)
				}
			}
			waitFor(t, 10*time.Second, fmt.Sprintf("goroutines back to %d", before), func() bool {
				return runtime.NumGoroutine() <= before
			})
		})
	}
}

// TestInboundDeadlines: a plain TCP connection that sends nothing, and a
// TLS one that never finishes its handshake, are closed after
// HandshakeTimeout; an established connection on which nothing arrives is
// closed after IdleTimeout.
func TestInboundDeadlines(t *testing.T) {
	ca := newCA(t, "cluster")
	for _, withTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain TCP", true: "mutual TLS"}[withTLS], func(t *testing.T) {
			cfg := Config{HandshakeTimeout: 200 * time.Millisecond, IdleTimeout: 400 * time.Millisecond}
			if withTLS {
				cfg.TLS = ca.mutual(t, "srv")
			}
			tr := newTestTCP(t, cfg)
			addr := string(tr.LocalAddr())
			// dial opens a connection that gets past the handshake, then
			// sends nothing more.
			dial := func() (net.Conn, error) {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					_, err = c.Write([]byte{0}) // an RPC type byte, then nothing
				}
				return c, err
			}
			if withTLS {
				client := ca.mutual(t, "cli")
				dial = func() (net.Conn, error) {
					c, err := tls.Dial("tcp", addr, client)
					if err == nil {
						_, err = c.Write([]byte{0})
					}
					return c, err
				}
			}
			silent, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			start := time.Now()
			if err := waitClosed(silent, 5*time.Second); err != nil {
				t.Fatalf("silent connection: %v", err)
			}
			if d := time.Since(start); d < 150*time.Millisecond {
				t.Errorf("silent connection closed after %v, before HandshakeTimeout", d)
			}
			idle, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			defer idle.Close()
			start = time.Now()
			if err := waitClosed(idle, 5*time.Second); err != nil {
				t.Fatalf("idle connection: %v", err)
			}
			if d := time.Since(start); d < 300*time.Millisecond {
				t.Errorf("idle connection closed after %v, before IdleTimeout", d)
			}
			waitFor(t, 5*time.Second, "the counts", func() bool {
				s, _ := Inbound(tr)
				return s.HandshakeFailed == 1 && s.IdleClosed == 1 && s.Open == 0
			})
		})
	}
}

// waitClosed reads from c until the server closes it, or fails after d.
func waitClosed(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 256)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("still open after %v", d)
		}
		return nil
	}
}

// TestInboundMalformedFrames: hostile bytes on a plain TCP connection — an
// RPC type raft does not know, bytes that are not msgpack, and
// AppendEntries requests whose lengths claim 2^32-1 entries or a 2 GiB
// entry and then never deliver them (the connection stays open, or closes
// half-way) — never reach the consumer, end with the connection closed
// (at once, or after IdleTimeout), cost no memory beyond what was sent
// (a claimed length is not allocated up front), and leave nothing open.
func TestInboundMalformedFrames(t *testing.T) {
	tr := newTestTCP(t, Config{HandshakeTimeout: time.Second, IdleTimeout: 300 * time.Millisecond, Timeout: time.Second})
	got := answer(t, tr)
	addr := string(tr.LocalAddr())
	const rpcAppendEntries = 0 // raft's NetworkTransport type byte
	entries := append([]byte{rpcAppendEntries, 0x81, 0xa7}, "Entries"...)
	frames := []struct {
		name  string
		bytes []byte
		close bool // the sender closes after the bytes; otherwise it goes silent
	}{
		{"unknown RPC type", []byte{0xff, 0x81, 0xa4, 'T', 'e', 'r', 'm', 0x01}, false},
		{"not msgpack", append([]byte{rpcAppendEntries}, bytes.Repeat([]byte{0xc1}, 64)...), false},
		{"2^32-1 entries claimed, none sent", append(slices.Clone(entries), 0xdd, 0xff, 0xff, 0xff, 0xff), false},
		{"a 2 GiB entry claimed, 64 KiB sent, then closed", append(append(slices.Clone(entries), 0x91, 0x81, 0xa4, 'D', 'a', 't', 'a', 0xc6, 0x80, 0, 0, 0), make([]byte, 64<<10)...), true},
		{"a 2 GiB entry claimed, 64 KiB sent, then silent", append(append(slices.Clone(entries), 0x91, 0x81, 0xa4, 'D', 'a', 't', 'a', 0xc6, 0x80, 0, 0, 0), make([]byte, 64<<10)...), false},
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, f := range frames {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(f.bytes); err != nil {
			t.Fatalf("%s: write: %v", f.name, err)
		}
		if f.close {
			_ = c.(*net.TCPConn).CloseWrite()
		}
		if err := waitClosed(c, 5*time.Second); err != nil {
			t.Errorf("%s: the server did not close the connection: %v", f.name, err)
		}
		_ = c.Close()
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
		t.Errorf("the hostile frames cost %d MiB of allocations, want a few (what was sent)", d>>20)
	}
	select {
	case rpc := <-got:
		t.Errorf("a malformed frame reached the consumer: %#v", rpc.Command)
	default:
	}
	waitFor(t, 5*time.Second, "every hostile connection to be released", func() bool {
		s, _ := Inbound(tr)
		return s.Open == 0 && s.Accepted == uint64(len(frames))
	})
	// The transport still serves a real RPC.
	peer := newTestTCP(t, Config{Timeout: time.Second})
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("p"), Addr: []byte(peer.LocalAddr())}, Term: 1}
	if err := peer.AppendEntries("s", tr.LocalAddr(), req, &raft.AppendEntriesResponse{}); err != nil {
		t.Fatalf("a real RPC after the hostile frames: %v", err)
	}
}
