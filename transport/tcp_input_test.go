package transport

import (
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/freeport"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mustBind checks that addr can be listened on, i.e. a failed NewTCP left
// nothing behind.
func mustBind(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s still in use after a failed NewTCP: %v", addr, err)
	}
	_ = ln.Close()
}

func TestNewTCPBadInput(t *testing.T) {
	tests := []struct {
		name      string
		bindHost  string
		advertise string
		cfg       Config
		want      error
	}{
		{"advertise name with a bad byte", "127.0.0.1", "node_1.example:7000", Config{}, ErrNotAdvertisable},
		{"advertise name with an empty label", "127.0.0.1", "node..example:7000", Config{}, ErrNotAdvertisable},
		{"advertise name with a hyphen label end", "127.0.0.1", "node-.example:7000", Config{}, ErrNotAdvertisable},
		{"unspecified advertise", "127.0.0.1", "0.0.0.0:7000", Config{}, ErrNotAdvertisable},
		{"unspecified IPv6 advertise", "127.0.0.1", "[::]:7000", Config{}, ErrNotAdvertisable},
		{"multicast advertise", "127.0.0.1", "224.0.0.1:7000", Config{}, ErrNotAdvertisable},
		{"advertise port 0", "127.0.0.1", "127.0.0.1:0", Config{}, ErrNotAdvertisable},
		{"advertise without port", "127.0.0.1", "127.0.0.1", Config{}, ErrNotAdvertisable},
		{"advertise without host", "127.0.0.1", ":7000", Config{}, ErrNotAdvertisable},
		{"unspecified bind, no advertise", "0.0.0.0", "", Config{}, ErrNotAdvertisable},
		{"empty bind host, no advertise", "", "", Config{}, ErrNotAdvertisable},
		{"negative MaxPool", "127.0.0.1", "", Config{MaxPool: -1}, ErrInvalidConfig},
		{"negative Timeout", "127.0.0.1", "", Config{Timeout: -time.Second}, ErrInvalidConfig},
		{"TLS without certificate", "127.0.0.1", "", Config{TLS: &tls.Config{}}, ErrInvalidConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			bind := net.JoinHostPort(tc.bindHost, port)
			tc.cfg.Logger = quietLogger()
			tr, err := NewTCP(bind, tc.advertise, tc.cfg)
			if !errors.Is(err, tc.want) || tr != nil {
				if tr != nil {
					_ = tr.Close()
				}
				t.Fatalf("NewTCP(%q, %q) = %v, %v; want %v", bind, tc.advertise, tr, err, tc.want)
			}
			mustBind(t, bind)
		})
	}
}

func TestNewTCPBindInUse(t *testing.T) {
	occupier, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := occupier.Addr().String()
	tr, err := NewTCP(addr, "", Config{Logger: quietLogger()})
	if !errors.Is(err, ErrListen) || !errors.Is(err, syscall.EADDRINUSE) || tr != nil {
		t.Fatalf("NewTCP on a used port = %v, %v; want ErrListen wrapping EADDRINUSE", tr, err)
	}
	_ = occupier.Close()
	mustBind(t, addr)
}

func TestNewTCPAdvertise(t *testing.T) {
	// Unspecified bind with an explicit advertise address is fine.
	port := strconv.Itoa(freePort(t))
	tr, err := NewTCP("0.0.0.0:"+port, "127.0.0.1:"+port, Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(tr.LocalAddr()); got != "127.0.0.1:"+port {
		t.Fatalf("LocalAddr = %q", got)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	mustBind(t, "0.0.0.0:"+port)

	// A host name is kept as given, so peers resolve it themselves.
	tr, err = NewTCP("127.0.0.1:0", "localhost:7000", Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if got := string(tr.LocalAddr()); got != "localhost:7000" {
		t.Fatalf("LocalAddr = %q, want localhost:7000", got)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	cfg := Config{}
	tr, err := NewTCP("127.0.0.1:0", "", cfg)
	if err != nil {
		t.Fatal(err)
	}
	_ = tr.Close()
	if cfg.MaxPool != 0 || cfg.Timeout != 0 || cfg.Logger != nil || cfg.MaxInbound != 0 || cfg.HandshakeTimeout != 0 || cfg.IdleTimeout != 0 || cfg.Dial != nil || cfg.TLS != nil {
		t.Fatalf("NewTCP wrote defaults into the caller's Config: %+v", cfg)
	}
	c := Config{}.withDefaults()
	if c.MaxPool != DefaultMaxPool || c.Timeout != DefaultTimeout || c.Logger == nil || c.MaxInbound != DefaultMaxInbound ||
		c.HandshakeTimeout != DefaultHandshakeTimeout || c.IdleTimeout != DefaultIdleTimeout {
		t.Fatalf("defaults = %+v", c)
	}
}

// TestNewTCPAdvertiseResolvesLater: an advertise name that does not resolve
// yet (.invalid never does) is kept as given, for peers to resolve when they
// dial: a pod whose DNS record is published after it starts must not fail
// at start.
func TestNewTCPAdvertiseResolvesLater(t *testing.T) {
	const adv = "node-0.not-published-yet.invalid:7000"
	tr, err := NewTCP("127.0.0.1:0", adv, Config{Logger: quietLogger()})
	if err != nil {
		t.Fatalf("NewTCP with an advertise name that does not resolve yet: %v", err)
	}
	defer tr.Close()
	if got := string(tr.LocalAddr()); got != adv {
		t.Fatalf("LocalAddr = %q, want %q as given", got, adv)
	}
}
