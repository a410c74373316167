package main

import (
	"testing"

	"github.com/termfence/termfence/internal/s3server"
)

// needVersitygw skips t, saying why, when the versitygw S3 server is not
// installed (CI installs it: .ci/run's versitygw block).
func needVersitygw(t *testing.T) {
	t.Helper()
	if _, err := s3server.Find(); err != nil {
		t.Skipf("skipping: the object-store scenario needs versitygw: %v", err)
	}
}
