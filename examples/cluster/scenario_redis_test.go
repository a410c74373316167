package main

import (
	"testing"

	"github.com/termfence/termfence/internal/redisserver"
)

// needRedis skips t, saying why, when redis-server is not installed (CI
// installs it: .ci/run's redis block).
func needRedis(t *testing.T) {
	t.Helper()
	if _, err := redisserver.Find(); err != nil {
		t.Skipf("skipping: the redis scenario needs redis-server: %v", err)
	}
}
