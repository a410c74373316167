//go:build unix && !aix

package dirfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/dirfence"
)

// Two processes (here two Fence values, which flock treats alike) share a
// fence directory. The first keeps writing under term 33 without a system
// call per write; the second raises to term 34, which waits for the first's
// write in flight and makes the first let go of its lock, and from then on
// term 33 is refused.
func ExampleOpenWith() {
	dir, err := os.MkdirTemp("", "fence")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	// A longer linger keeps the shared lock between bursts of writes; a
	// raise elsewhere still gets it within about one probe interval.
	a, err := dirfence.OpenWith(dir, dirfence.Options{Linger: time.Second, Probe: time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	b, err := dirfence.Open(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	e33 := epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"}
	e34 := epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}
	write := func(context.Context) error { return nil }
	for i := 0; i < 3; i++ {
		fmt.Println("a, term 33:", a.Do(ctx, "ledger", e33, write))
	}
	fmt.Println("b, term 34:", b.Do(ctx, "ledger", e34, write))
	err = a.Do(ctx, "ledger", e33, write)
	fmt.Println("a, term 33 stale:", errors.Is(err, storageguard.ErrStale))
	// Output:
	// a, term 33: <nil>
	// a, term 33: <nil>
	// a, term 33: <nil>
	// b, term 34: <nil>
	// a, term 33 stale: true
}
