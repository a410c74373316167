//go:build race

package main

// raceEnabled: the test binary runs under the race detector, so the binary
// under test is built with it too (and shares its build cache).
const raceEnabled = true
