package main

import (
	"fmt"

	"github.com/termfence/termfence/perf/results"
)

func Example_table() {
	t, err := table([]results.Result{
		{System: results.SystemRaft, Scenario: results.ScenarioCrash, HeartbeatTimeoutMS: 50, SamplesMS: []float64{109, 98, 144}},
		{System: results.SystemTermfence, Scenario: results.ScenarioCrash, HeartbeatTimeoutMS: 50, SamplesMS: []float64{120, 131, 150}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(t)
	// Output:
	// | System | Scenario | Timing | n | p50 ms | p90 ms | p99 ms | max ms | p50 ÷ raw raft p50 |
	// |---|---|---|--:|--:|--:|--:|--:|--:|
	// | termfence | crash | HT 50ms | 3 | 131 | 150 | 150 | 150 | 1.20 |
	// | hashicorp-raft | crash | HT 50ms | 3 | 109 | 144 | 144 | 144 | 1.00 |
}
