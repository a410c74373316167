package results_test

import (
	"fmt"
	"os"

	"github.com/termfence/termfence/perf/results"
)

func Example() {
	f := results.File{
		Version: results.Version,
		Results: []results.Result{{
			System:             results.SystemRaft,
			Scenario:           results.ScenarioCrash,
			HeartbeatTimeoutMS: 50,
			SamplesMS:          []float64{109, 98.5, 144},
		}},
	}
	if err := results.Encode(os.Stdout, f); err != nil {
		fmt.Println(err)
		return
	}
	s := results.Summarize(f.Results[0].SamplesMS)
	fmt.Printf("%s: p50 %.1f ms, max %.0f ms\n", f.Results[0].Name(), s.P50, s.Max)
	// Output:
	// {
	//   "version": 1,
	//   "results": [
	//     {
	//       "system": "hashicorp-raft",
	//       "scenario": "crash",
	//       "heartbeat_timeout_ms": 50,
	//       "samples_ms": [
	//         109,
	//         98.5,
	//         144
	//       ]
	//     }
	//   ]
	// }
	// hashicorp-raft crash HT 50ms: p50 109.0 ms, max 144 ms
}
