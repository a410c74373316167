package transport

import (
	"testing"
	"time"
)

func newTestTCP(t *testing.T, cfg Config) Transport {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	tr, err := NewTCP("127.0.0.1:0", "", cfg)
	if err != nil {
		t.Fatalf("NewTCP: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func TestTCPClusterElects(t *testing.T) {
	nodes := startCluster(t, fast, newTestTCP(t, Config{}), newTestTCP(t, Config{}), newTestTCP(t, Config{}))
	leader, _ := waitLeader(t, nodes)
	if err := leader.r.Apply([]byte("x"), 5*time.Second).Error(); err != nil {
		t.Fatalf("apply: %v", err)
	}
}
