package transport

import (
	"testing"
)

func TestInmemConnectDisconnectBidirectional(t *testing.T) {
	a, b := NewInmem("a"), NewInmem("b")
	defer a.Close()
	defer b.Close()
	stop := make(chan struct{})
	ra, rb := respond(a.Consumer(), stop), respond(b.Consumer(), stop)
	defer func() { close(stop); ra.wg.Wait(); rb.wg.Wait() }()

	if err := send(a, "b"); err == nil {
		t.Fatal("a->b before Connect succeeded")
	}
	a.Connect(b)
	if err := send(a, "b"); err != nil {
		t.Fatalf("a->b: %v", err)
	}
	if err := send(b, "a"); err != nil {
		t.Fatalf("b->a: %v", err)
	}
	b.Disconnect(a)
	if err := send(a, "b"); err == nil {
		t.Fatal("a->b after Disconnect succeeded")
	}
	if err := send(b, "a"); err == nil {
		t.Fatal("b->a after Disconnect succeeded")
	}
	if ra.count() != 1 || rb.count() != 1 {
		t.Fatalf("a got %d, b got %d; want 1 each", ra.count(), rb.count())
	}
	if NewInmem("").LocalAddr() == "" {
		t.Fatal("NewInmem(\"\") has no address")
	}
}

func TestInmemClusterElects(t *testing.T) {
	a, b, c := NewInmem("a"), NewInmem("b"), NewInmem("c")
	a.Connect(b)
	a.Connect(c)
	b.Connect(c)
	nodes := startCluster(t, fast, a, b, c)
	waitLeader(t, nodes)
}
