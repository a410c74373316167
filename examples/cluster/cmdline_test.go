package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestCommandLineErrorsShort: a wrong command line gets its reason and a
// pointer to -h, not the reason buried above forty lines of usage.
func TestCommandLineErrorsShort(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(context.Context, []string, *bytes.Buffer) error
		args []string
		want string
	}{
		{"node without -data", func(ctx context.Context, a []string, b *bytes.Buffer) error { return nodeMain(ctx, a, b) },
			[]string{"-id", "n1", "-raft", "127.0.0.1:1"}, "-data is required"},
		{"store without -data", func(ctx context.Context, a []string, b *bytes.Buffer) error { return storeMain(ctx, a, b) },
			nil, "-data is required"},
	} {
		var stderr bytes.Buffer
		err := c.run(context.Background(), c.args, &stderr)
		if err != errUsage {
			t.Errorf("%s: %v, want errUsage", c.name, err)
		}
		out := stderr.String()
		if !strings.Contains(out, c.want) || strings.Count(out, "\n") > 3 || !strings.Contains(out, "-h") {
			t.Errorf("%s printed %d lines:\n%s\nwant %q and a pointer to -h in at most 3", c.name, strings.Count(out, "\n"), out, c.want)
		}
	}
}

// TestJoinHelpSaysRetry: -join's help says what happens (a follower
// answers 503 naming the leader and the node asks the leader), not that the
// follower forwards.
func TestJoinHelpSaysRetry(t *testing.T) {
	var stderr bytes.Buffer
	_ = nodeMain(context.Background(), []string{"-h"}, &stderr)
	help := stderr.String()
	if strings.Contains(help, "forwards to the leader") || !strings.Contains(help, "503 naming the leader") {
		t.Errorf("cluster node -h on -join:\n%s", help)
	}
}
