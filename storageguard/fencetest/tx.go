package fencetest

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// TxAPI is what TxAtomic needs of a database and of a fence's transaction
// method (sqlfence's and pgfence's Tx).
type TxAPI struct {
	// Placeholder is the dialect's first statement placeholder ("?", "$1").
	Placeholder string
	// Exec runs stmt outside any fence.
	Exec func(stmt string) error
	// Read returns the content column of row 'f' of table files, outside
	// any fence.
	Read func() (string, error)
	// Tx runs stmt with args in the fence's transaction under e for
	// resource "files/f", and then returns then (nil commits).
	Tx func(e epoch.Epoch, then error, stmt string, args ...any) error
	// NilFn calls the fence's transaction method with a nil function.
	NilFn func(e epoch.Epoch) error
}

// TxAtomic checks a fence that runs the application's writes in the
// transaction that checks the epoch: the write and the fence commit
// together or not at all, a stale epoch's write never commits, a nil
// function is refused, and a term beyond the database's integers is
// refused (epoch.ErrMalformed). f is the same fence, through its Fence
// methods. It creates table files(id, content).
func TxAtomic(t *testing.T, f storageguard.Fence, api TxAPI) {
	t.Helper()
	ctx := context.Background()
	for _, stmt := range []string{
		"CREATE TABLE files (id TEXT PRIMARY KEY, content TEXT NOT NULL)",
		"INSERT INTO files VALUES ('f', 'v0')",
	} {
		if err := api.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	set := func(e epoch.Epoch, content string) error {
		return api.Tx(e, nil, "UPDATE files SET content = "+api.Placeholder+" WHERE id = 'f'", content)
	}
	content := func() string {
		c, err := api.Read()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	e33, e34 := ep(33, "node-a"), ep(34, "node-b")
	if err := set(e33, "A0"); err != nil {
		t.Fatal(err)
	}
	if err := set(e34, "B"); err != nil {
		t.Fatal(err)
	}
	if err := set(e33, "A"); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("stale Tx = %v", err)
	}
	if c := content(); c != "B" {
		t.Fatalf("content = %q, want B", c)
	}
	// fn fails: its write and the raise to 35 roll back together.
	boom := errors.New("boom")
	if err := api.Tx(ep(35, "node-c"), boom, "UPDATE files SET content = 'C' WHERE id = 'f'"); !errors.Is(err, boom) {
		t.Fatalf("Tx = %v, want fn's error", err)
	}
	if c := content(); c != "B" {
		t.Fatalf("content = %q after a failed Tx", c)
	}
	if h, _ := f.Highest(ctx, "files/f"); h != e34 {
		t.Fatalf("Highest = %v after a rolled-back raise, want %v", h, e34)
	}
	if err := api.NilFn(e34); err == nil {
		t.Fatal("Tx with nil fn succeeded")
	}
	huge := epoch.Epoch{Cluster: "payments", Term: math.MaxInt64 + 1, Leader: "x"}
	if err := f.Admit(ctx, "files/f", huge); !errors.Is(err, epoch.ErrMalformed) {
		t.Fatalf("Admit(term 2^63) = %v", err)
	}
}

// TxSameEpochConcurrent admits an epoch for resource "r" of f and runs two
// transactions under it (tx runs body in one, perhaps more than once if the
// fence retries), each waiting inside for the other to enter: both must be
// inside at once.
func TxSameEpochConcurrent(t *testing.T, f storageguard.Fence, tx func(ctx context.Context, e epoch.Epoch, body func() error) error) {
	t.Helper()
	ctx := context.Background()
	e := ep(5, "a")
	if err := f.Admit(ctx, "r", e); err != nil {
		t.Fatal(err)
	}
	entered := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			errs[i] = tx(ctx, e, func() error {
				if first {
					close(entered[i])
					first = false
				}
				<-entered[1-i]
				return nil
			})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
