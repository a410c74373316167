package transport

import (
	"errors"
	"testing"
	"time"

	"github.com/termfence/termfence/internal/testwait"
)

func TestFaultyDelay(t *testing.T) {
	fs, _ := inmemFaulty(t, 2)
	a, b := fs[0], fs[1]
	stop := make(chan struct{})
	rb := respond(b.Consumer(), stop)
	defer func() { close(stop); rb.wg.Wait() }()

	const d = 100 * time.Millisecond
	a.Delay(d)
	start := time.Now()
	if err := send(a, b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("delayed RPC took %v, want at least %v", took, d)
	}
	// Close releases an RPC waiting out its delay.
	a.Delay(time.Hour)
	errc := make(chan error, 1)
	go func() { errc <- send(a, b.LocalAddr()) }()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("RPC delayed across Close: %v, want ErrClosed", err)
		}
	case <-time.After(testwait.Bound(5 * time.Second)):
		t.Fatal("Close did not interrupt a delayed RPC")
	}
}

func dropPattern(t *testing.T, f *Faulty, to *Faulty, n int) []bool {
	t.Helper()
	out := make([]bool, n)
	for i := range out {
		err := send(f, to.LocalAddr())
		switch {
		case errors.Is(err, ErrDropped):
			out[i] = true
		case err != nil:
			t.Fatalf("rpc %d: %v", i, err)
		}
	}
	return out
}

func TestFaultyDropReproducible(t *testing.T) {
	fs, _ := inmemFaulty(t, 2)
	a, b := fs[0], fs[1]
	stop := make(chan struct{})
	rb := respond(b.Consumer(), stop)
	defer func() { close(stop); rb.wg.Wait() }()

	const n = 400
	a.Drop(0.3, 42)
	first := dropPattern(t, a, b, n)
	a.Drop(0.3, 42)
	second := dropPattern(t, a, b, n)
	a.Drop(0.3, 43)
	third := dropPattern(t, a, b, n)

	dropped, same, sameOther := 0, true, true
	for i := range first {
		if first[i] {
			dropped++
		}
		same = same && first[i] == second[i]
		sameOther = sameOther && first[i] == third[i]
	}
	if !same {
		t.Fatal("same seed gave different drops")
	}
	if sameOther {
		t.Fatal("different seeds gave identical drops")
	}
	if dropped < n/5 || dropped > 2*n/5 {
		t.Fatalf("dropped %d of %d at p=0.3", dropped, n)
	}
	if delivered := rb.count(); delivered != 3*n-dropped-countTrue(second)-countTrue(third) {
		t.Fatalf("b received %d RPCs, want every undropped one", delivered)
	}

	a.Drop(1, 1)
	for _, d := range dropPattern(t, a, b, 20) {
		if !d {
			t.Fatal("p=1 let an RPC through")
		}
	}
	a.Drop(0, 0)
	for _, d := range dropPattern(t, a, b, 20) {
		if d {
			t.Fatal("p=0 dropped an RPC")
		}
	}
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
