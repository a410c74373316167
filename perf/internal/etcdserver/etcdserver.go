// Package etcdserver starts a single-member etcd embedded in the process
// (go.etcd.io/etcd/server/v3/embed) on free loopback ports, with its data in
// a new temporary directory: the server the etcd side of the failover and
// role figures in docs/PERFORMANCE.md runs against (cmd/etcdfailover,
// cmd/etcdroles).
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config is the embedded server's timing.
type Config struct {
	TickMs     uint // etcd --heartbeat-interval
	ElectionMs uint // etcd --election-timeout
	Verbose    bool // server logs at info to stderr; otherwise not at all
}

// Server is a running single-member embedded etcd.
type Server struct {
	etcd *embed.Etcd
	// Endpoint is the client address, host:port.
	Endpoint string
	dir      string
}

// Start starts a single-member etcd on free loopback ports with its data in
// a new temporary directory, and waits until it serves.
func Start(ctx context.Context, sc Config) (*Server, error) {
	dir, err := os.MkdirTemp("", "etcdserver-")
	if err != nil {
		return nil, fmt.Errorf("etcdserver: %w", err)
	}
	// A port found free can be taken before etcd binds it; try a few times.
	var lastErr error
	for range 5 {
		s, err := tryStart(ctx, dir, sc)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

func tryStart(ctx context.Context, dir string, sc Config) (*Server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}

	cfg := embed.NewConfig()
	cfg.Name = "perf"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs = sc.TickMs
	cfg.ElectionMs = sc.ElectionMs
	// Quiet by default: shutting an embedded server down logs errors for its
	// closed listeners. A failure to start still reaches us through e.Err().
	lg := zap.NewNop()
	if sc.Verbose {
		lg = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()),
			zapcore.Lock(os.Stderr), zapcore.InfoLevel))
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)

	// A failed start may leave a half-initialised data dir behind: start each
	// attempt from an empty one.
	if err := clearDir(dir); err != nil {
		return nil, err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdserver: start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdserver: etcd failed: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcdserver: etcd not ready: %w", ctx.Err())
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("etcdserver: etcd not ready after 60s")
	}
	return &Server{etcd: e, Endpoint: clientURL.Host, dir: dir}, nil
}

// Close stops the server and removes its data.
func (s *Server) Close() error {
	s.etcd.Close()
	return os.RemoveAll(s.dir)
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("etcdserver: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("etcdserver: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(dir + string(os.PathSeparator) + e.Name()); err != nil {
			return fmt.Errorf("etcdserver: %w", err)
		}
	}
	return nil
}
