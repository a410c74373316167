//go:build linux

package netlab_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/termfence/termfence/internal/netlab"
	"github.com/termfence/termfence/internal/netlab/netlabtest"
)

// TestConfigRefused: a bad Config is refused with ErrInvalid before
// anything is made.
func TestConfigRefused(t *testing.T) {
	for _, hosts := range [][]string{
		nil,
		{},
		netlab.Names("h", 251),
		{"H1"},
		{"1h"},
		{"h-1"},
		{"averyveryverylongname"},
		{"a", "a"},
		{""},
		{"a/b"},
	} {
		before := labOf(t, os.Getpid())
		l, err := netlab.New(context.Background(), netlab.Config{Hosts: hosts})
		if !errors.Is(err, netlab.ErrInvalid) {
			t.Errorf("New(%q): %v, want ErrInvalid", hosts, err)
		}
		if l != nil {
			t.Errorf("New(%q) returned a lab with its error", hosts)
			l.Close()
		}
		if after := labOf(t, os.Getpid()); len(after) != len(before) {
			t.Errorf("New(%q) left namespaces: %q", hosts, after)
		}
	}
}

// TestFaultRefused: a fault that cannot be — a host of another lab, a nil
// host, a host cut from itself, an unknown mode, a second mode on a link,
// a partition with fewer than two sides, an empty side or a host on two
// sides — is refused with ErrInvalid and changes nothing: no fault is in
// force and every pair still connects.
func TestFaultRefused(t *testing.T) {
	t.Parallel()
	lab := netlabtest.New(t, netlab.Names("h", 3)...)
	other := netlabtest.New(t, "x")
	ctx := context.Background()
	h1, h2, h3 := lab.Host("h1"), lab.Host("h2"), lab.Host("h3")
	x := other.Host("x")
	for _, h := range lab.Hosts() {
		serve(t, h)
	}
	if err := lab.Block(ctx, h1, h2, netlab.Unreachable); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"block from a host of another lab": func() error { return lab.Block(ctx, x, h1, netlab.Silent) },
		"block to a host of another lab":   func() error { return lab.Block(ctx, h1, x, netlab.Silent) },
		"block from nil":                   func() error { return lab.Block(ctx, nil, h1, netlab.Silent) },
		"block a host from itself":         func() error { return lab.Block(ctx, h1, h1, netlab.Silent) },
		"mode 0":                           func() error { return lab.Block(ctx, h1, h3, 0) },
		"mode 99":                          func() error { return lab.Block(ctx, h1, h3, 99) },
		"a second mode on a blocked link":  func() error { return lab.Block(ctx, h1, h2, netlab.Refused) },
		"isolate a host of another lab":    func() error { return lab.Isolate(x) },
		"rejoin a host of another lab":     func() error { return lab.Rejoin(x) },
		"partition with one side":          func() error { return lab.Partition(ctx, netlab.Silent, []*netlab.Host{h1}) },
		"partition with an empty side":     func() error { return lab.Partition(ctx, netlab.Silent, []*netlab.Host{h1}, nil) },
		"partition, a host on two sides": func() error {
			return lab.Partition(ctx, netlab.Silent, []*netlab.Host{h1, h3}, []*netlab.Host{h3})
		},
		"partition with a host of another lab": func() error {
			return lab.Partition(ctx, netlab.Silent, []*netlab.Host{h3}, []*netlab.Host{x})
		},
		"partition, bad mode": func() error {
			return lab.Partition(ctx, 0, []*netlab.Host{h3}, []*netlab.Host{h1})
		},
		// h1->h2 is unreachable already: this partition cuts h3->h1,
		// h3->h2 and h1->h3 first, then fails on h1->h2 and undoes them.
		"partition over a link blocked another way": func() error {
			return lab.Partition(ctx, netlab.Silent, []*netlab.Host{h3}, []*netlab.Host{h1}, []*netlab.Host{h2})
		},
	} {
		if err := f(); !errors.Is(err, netlab.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
		if got := strings.Join(lab.Faults(), "; "); got != "h1 -> h2 blocked (unreachable)" {
			t.Errorf("%s: faults in force: %s", name, got)
		}
	}
	checkMatrix(t, "after refused faults", lab.Hosts(), with(3, []string{"h1", "h2", "h3"}, "h1>h2=EHOSTUNREACH", "h2>h1=timeout"))
	if _, err := netlab.ParseMode("loud"); !errors.Is(err, netlab.ErrInvalid) {
		t.Errorf("ParseMode(loud): %v", err)
	}
	for _, m := range netlab.Modes() {
		if p, err := netlab.ParseMode(m.String()); err != nil || p != m {
			t.Errorf("ParseMode(%v) = %v, %v", m, p, err)
		}
	}
}
