package election

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/termfence/termfence/transport"
	"github.com/termfence/termfence/transport/transporttest"
)

func TestValidate(t *testing.T) {
	tr := transport.NewInmem("a")
	defer tr.Close()
	ok := Config{ID: "a", Cluster: "c", DataDir: "/tmp/x", Transport: tr}
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" = valid; else a word the error must contain
	}{
		{"minimal", func(*Config) {}, ""},
		{"in memory without DataDir", func(c *Config) { c.DataDir, c.InMemory = "", true }, ""},
		{"all timeouts 50ms", func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 50*ms, 50*ms, 50*ms }, ""},
		{"HT only, above default LLT", func(c *Config) { c.HeartbeatTimeout = 800 * ms }, ""},
		{"bootstrap with self", func(c *Config) { c.Bootstrap = []Server{{"a", "a"}, {"b", "b"}} }, ""},
		{"empty ID", func(c *Config) { c.ID = "" }, "ID"},
		{"ID with space", func(c *Config) { c.ID = "a b" }, "ID"},
		{"ID too long", func(c *Config) { c.ID = strings.Repeat("a", 65) }, "ID"},
		{"empty Cluster", func(c *Config) { c.Cluster = "" }, "Cluster"},
		{"Cluster with slash", func(c *Config) { c.Cluster = "a/b" }, "Cluster"},
		{"no DataDir", func(c *Config) { c.DataDir = "" }, "DataDir"},
		{"no Transport", func(c *Config) { c.Transport = nil }, "Transport"},
		{"negative HT", func(c *Config) { c.HeartbeatTimeout = -ms }, "HeartbeatTimeout"},
		{"ET below 5ms", func(c *Config) { c.ElectionTimeout = 4 * ms }, "ElectionTimeout"},
		{"LLT below 5ms", func(c *Config) { c.LeaderLeaseTimeout = ms }, "LeaderLeaseTimeout"},
		{"LLT above HT", func(c *Config) { c.HeartbeatTimeout, c.LeaderLeaseTimeout = 50*ms, 60*ms }, "LeaderLeaseTimeout"},
		{"HT 100ms under the default LLT 500ms", func(c *Config) { c.HeartbeatTimeout = 100 * ms }, "LeaderLeaseTimeout"},
		{"HT above ET", func(c *Config) { c.HeartbeatTimeout, c.ElectionTimeout = 2*time.Second, time.Second }, "ElectionTimeout"},
		{"HT above default ET", func(c *Config) { c.HeartbeatTimeout = 2 * time.Second }, "ElectionTimeout"},
		{"bootstrap without self", func(c *Config) { c.Bootstrap = []Server{{"b", "b"}} }, "this node"},
		{"bootstrap bad ID", func(c *Config) { c.Bootstrap = []Server{{"a", "a"}, {"", "b"}} }, "Bootstrap[1]"},
		{"bootstrap no Addr", func(c *Config) { c.Bootstrap = []Server{{"a", ""}} }, "Addr"},
		{"bootstrap duplicate ID", func(c *Config) { c.Bootstrap = []Server{{"a", "a"}, {"a", "b"}} }, "twice"},
		{"bootstrap duplicate Addr", func(c *Config) { c.Bootstrap = []Server{{"a", "a"}, {"b", "a"}} }, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			before := cfg
			err := cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
			} else if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want ErrInvalidConfig mentioning %q", err, tc.want)
			}
			if cfg.HeartbeatTimeout != before.HeartbeatTimeout || cfg.Signer != nil || cfg.Logger != nil || cfg.FSM != nil {
				t.Fatal("Validate wrote defaults into the caller's Config")
			}
			if tc.want != "" {
				if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("New: %v, want ErrInvalidConfig", err)
				}
			}
		})
	}
}

func TestNewRefusesBootstrapAddrMismatch(t *testing.T) {
	tr := transport.NewInmem("a")
	defer tr.Close()
	_, err := New(Config{ID: "a", Cluster: "c", InMemory: true, Transport: tr, Bootstrap: []Server{{"a", "elsewhere"}}})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New: %v, want ErrInvalidConfig", err)
	}
}

// TestNewRefusesCertificateOfAnotherServer: a node whose mutual-TLS
// certificate names another server ID than Config.ID is refused with
// ErrInvalidConfig (every peer would refuse its RPCs), and the transport
// stays the caller's, still working.
func TestNewRefusesCertificateOfAnotherServer(t *testing.T) {
	ca, err := transporttest.NewCA(t.TempDir(), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Peer("n2")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := transport.MutualTLS(cert, key, ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := transport.NewTCP("127.0.0.1:0", "", transport.Config{TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = New(Config{ID: "n1", Cluster: "c", InMemory: true, Transport: tr, Bootstrap: []Server{{"n1", string(tr.LocalAddr())}}})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "names server n2") {
		t.Fatalf("New as n1 with n2's certificate: %v, want ErrInvalidConfig naming n2", err)
	}
	el, err := New(Config{ID: "n2", Cluster: "c", InMemory: true, Transport: tr, Bootstrap: []Server{{"n2", string(tr.LocalAddr())}}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New as n2 with n2's certificate on the same transport: %v", err)
	}
	_ = el.Close()
}
