package transport

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkAppendEntries measures one AppendEntries round trip over loopback
// (client sends, the server's consumer answers at once), empty and with
// 16 x 1 KiB entries, over NewTCP, NewTCP with mutual TLS, and the unwrapped
// raft.NewTCPTransport as the baseline.
func BenchmarkAppendEntries(b *testing.B) {
	payloads := []struct {
		name    string
		entries int
	}{{"empty", 0}, {"16x1KiB", 16}}
	ca := newCA(b, "bench")
	kinds := []struct {
		name string
		make func(b *testing.B) raft.Transport
	}{
		{"raw", func(b *testing.B) raft.Transport {
			tr, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, DefaultMaxPool, DefaultTimeout, quietHCLog())
			if err != nil {
				b.Fatal(err)
			}
			return tr
		}},
		{"tcp", func(b *testing.B) raft.Transport { return newBenchTCP(b, Config{}) }},
		{"tls", func(b *testing.B) raft.Transport { return newBenchTCP(b, Config{TLS: ca.mutual(b, "n")}) }},
	}
	for _, p := range payloads {
		for _, k := range kinds {
			b.Run(p.name+"/"+k.name, func(b *testing.B) {
				client, server := k.make(b), k.make(b)
				defer client.(raft.WithClose).Close()
				defer server.(raft.WithClose).Close()
				stop := make(chan struct{})
				done := make(chan struct{})
				go func() {
					defer close(done)
					for {
						select {
						case rpc := <-server.Consumer():
							rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
						case <-stop:
							return
						}
					}
				}()
				defer func() { close(stop); <-done }()
				req := &raft.AppendEntriesRequest{
					RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("c"), Addr: []byte(client.LocalAddr())},
					Term:         1,
					PrevLogEntry: 1,
					PrevLogTerm:  1,
				}
				for i := 0; i < p.entries; i++ {
					req.Entries = append(req.Entries, &raft.Log{Index: uint64(i + 2), Term: 1, Type: raft.LogCommand, Data: make([]byte, 1024), AppendedAt: time.Now()})
				}
				var resp raft.AppendEntriesResponse
				// Warm the connection pool (and the TLS handshake).
				if err := client.AppendEntries("s", server.LocalAddr(), req, &resp); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := client.AppendEntries("s", server.LocalAddr(), req, &resp); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func newBenchTCP(b *testing.B, cfg Config) Transport {
	b.Helper()
	cfg.Logger = quietLogger()
	tr, err := NewTCP("127.0.0.1:0", "", cfg)
	if err != nil {
		b.Fatal(err)
	}
	return tr
}
