package liveness_test

import (
	"context"
	"fmt"
	"time"

	"github.com/termfence/termfence/internal/liveness"
)

// A harness heals a fault, then waits for service with a Ready function
// that says what is still missing.
func Example() {
	report := liveness.Report{Bound: 5 * time.Second}
	leader := false
	polls := 0
	ready := func() string {
		polls++
		if polls == 3 { // in a real harness: a status poll found a leader
			leader = true
		}
		if !leader {
			return "no leader with a confirmed epoch"
		}
		return ""
	}
	ended := time.Now() // the partition was healed just now
	rec, err := liveness.Await(context.Background(), "fault 1 (partition)", ended, report.Bound, time.Millisecond, ready)
	if err != nil {
		fmt.Println(err)
		return
	}
	report.Add(rec)
	fmt.Println(rec.Late, polls, report.OK(), len(report.Errors()))
	// Output: false 3 true 0
}
