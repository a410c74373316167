//go:build race

package epoch_test

// raceEnabled: the race detector makes the single-goroutine exhaustive
// tests some 15 times slower while finding nothing in them; they sample.
const raceEnabled = true
