package chaos_test

import (
	"fmt"
	"time"

	"github.com/termfence/termfence/internal/chaos"
)

// A paused leader's write with term 33 is accepted after term 34 was
// acknowledged and read back: what the fence exists to refuse.
func ExampleCheck() {
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	h := chaos.History{Ops: []chaos.Op{
		{Client: 0, Kind: chaos.Write, Resource: "r", Value: "a", Node: "n1", Call: at(0), Return: at(50), Outcome: chaos.Acked, Term: 33, Leader: "n1"},
		{Client: 1, Kind: chaos.Write, Resource: "r", Value: "b", Node: "n2", Call: at(10), Return: at(12), Outcome: chaos.Acked, Term: 34, Leader: "n2"},
		{Client: 2, Kind: chaos.Read, Resource: "r", Value: "b", Call: at(13), Return: at(14), Outcome: chaos.ReadValue, Term: 34, Leader: "n2"},
		{Client: 2, Kind: chaos.Read, Resource: "r", Value: "a", Call: at(51), Return: at(52), Outcome: chaos.ReadValue, Term: 33, Leader: "n1"},
	}}
	r := chaos.Check(h, 0)
	fmt.Println(r.Line(1, 1))
	fmt.Println(r.Details[0])
	// Output:
	// chaos: seed=1 faults=1 ops=4 acked=2 refused_stale=0 stale_accepted=1 lost=0 linearizable=false
	// stale accepted: read at 51ms returned a term 33 (write via n1 called at 0s, acked), after the store held term 34 at 12ms
}
