package boltfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/boltfence"
)

// The seed's scenario on a fence that survives a restart: node-b's term 34
// is admitted and recorded; after the process restarts, node-a's late
// write under term 33 is still refused.
func Example() {
	dir, err := os.MkdirTemp("", "fence")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fence.db")
	ctx := context.Background()
	a := epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"}
	b := epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}
	write := func(context.Context) error { return nil }

	f, err := boltfence.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("term 34:", f.Do(ctx, "ledger", b, write))
	f.Close() // the storage process restarts

	f, err = boltfence.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	err = f.Do(ctx, "ledger", a, write)
	fmt.Println("term 33 stale after restart:", errors.Is(err, storageguard.ErrStale))
	// Output:
	// term 34: <nil>
	// term 33 stale after restart: true
}
