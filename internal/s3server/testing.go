package s3server

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// ForTest starts a server for tb in a temporary directory with one bucket,
// and stops it when tb ends. It skips tb, saying why and how to install
// versitygw, when the binary is missing; any other failure fails tb.
func ForTest(tb testing.TB, bucket string) *Server {
	tb.Helper()
	if _, err := Find(); err != nil {
		tb.Skipf("skipping: no S3 server to test against: %v", err)
	}
	// Generous: versitygw starts in well under a second, but the machine
	// running the tests may be loaded.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, filepath.Join(tb.TempDir(), "versitygw"), bucket)
	if errors.Is(err, ErrNotInstalled) {
		tb.Skipf("skipping: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}
