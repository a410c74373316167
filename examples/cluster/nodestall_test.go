package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestStallAfterHealNeedsFaultEndpoint: the planted liveness bug is
// reachable only through POST /fault, so without -fault-endpoint the flag
// is refused with its reason, before anything starts.
func TestStallAfterHealNeedsFaultEndpoint(t *testing.T) {
	var stderr bytes.Buffer
	dir := t.TempDir()
	err := nodeMain(context.Background(), []string{"-id", "n1", "-raft", "127.0.0.1:1", "-data", filepath.Join(dir, "n1"),
		"-bootstrap", "n1=127.0.0.1:1", "-stall-after-heal"}, &stderr)
	if err != errUsage || !strings.Contains(stderr.String(), "-stall-after-heal needs -fault-endpoint") {
		t.Fatalf("err %v, stderr %q; want errUsage naming -fault-endpoint", err, stderr.String())
	}
}
