package redisserver

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/skiptest"
)

// ForTest starts a server for tb in a temporary directory with Durable and
// args, and kills it when tb ends. It skips tb, saying why and how to
// install redis-server, when the binary is missing; any other failure
// fails tb.
func ForTest(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return ForTestIn(tb, filepath.Join(tb.TempDir(), "redis"), args...)
}

// ForTestIn is ForTest with the server's directory given (a powerfs
// mount, say).
func ForTestIn(tb testing.TB, dir string, args ...string) *Server {
	tb.Helper()
	if _, err := Find(); err != nil {
		skiptest.Skip(tb, "redis-server (apt-get install redis-server)", "skipping: no redis-server to test against: %v", err)
	}
	// Generous: redis-server starts in milliseconds, but the machine
	// running the tests may be loaded.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, dir, args...)
	if errors.Is(err, ErrNotInstalled) {
		skiptest.Skip(tb, "redis-server (apt-get install redis-server)", "skipping: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Kill() })
	return s
}
