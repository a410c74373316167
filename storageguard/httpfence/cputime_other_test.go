//go:build !unix

package httpfence_test

import "time"

// cpuTime is not measured on this platform: the benchmark's CPU-per-request
// figures read 0.
func cpuTime() time.Duration { return 0 }
