//go:build unix && !aix

package dirfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// A fence in a directory of its own beside the application's data: the
// write to the shared disk runs only while term 34 is the newest the fence
// has seen, and term 33's late write is refused before it touches the
// file. The application's own directory is refused as a fence directory.
func ExampleOpen() {
	data, err := os.MkdirTemp("", "shared-disk")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(data)
	f, err := dirfence.Open(filepath.Join(data, "fence.d"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	ctx := context.Background()
	report := filepath.Join(data, "report.txt")
	write := func(ep epoch.Epoch, text string) error {
		return f.Do(ctx, "report.txt", ep, func(context.Context) error {
			return os.WriteFile(report, []byte(text), 0o600)
		})
	}
	fmt.Println(write(epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}, "from b"))
	err = write(epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"}, "late write from a")
	fmt.Println(errors.Is(err, storageguard.ErrStale))
	b, _ := os.ReadFile(report)
	fmt.Println(string(b))
	_, err = dirfence.Open(data) // holds report.txt: not the fence's own
	fmt.Println(errors.Is(err, dirfence.ErrNotOwnDirectory))
	// Output:
	// <nil>
	// true
	// from b
	// true
}
