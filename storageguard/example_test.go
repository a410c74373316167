package storageguard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// The seed's scenario: the leader of term 33 pauses, node-b wins term 34 and
// writes; when node-a wakes up, its write under 33 is refused.
func Example() {
	ctx := context.Background()
	fence := storageguard.NewMemory()
	defer fence.Close()

	data := []string{"v0"}
	write := func(who string) func(context.Context) error {
		return func(context.Context) error { data = append(data, who); return nil }
	}
	a := epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"}
	b := epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}

	err := fence.Do(ctx, "file", b, write("B"))
	fmt.Println("token 34:", err)
	err = fence.Do(ctx, "file", a, write("A"))
	fmt.Println("token 33 stale:", errors.Is(err, storageguard.ErrStale))
	fmt.Println(err)
	fmt.Println("data:", data)
	// Output:
	// token 34: <nil>
	// token 33 stale: true
	// storageguard: stale epoch for "file": presented payments/33/node-a, highest payments/34/node-b
	// data: [v0 B]
}
