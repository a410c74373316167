package election

import (
	"testing"

	"github.com/termfence/termfence/transport"
)

// BenchmarkEpoch measures the leader's hot path: the triple read plus the
// published-term check (no locks, no allocation).
func BenchmarkEpoch(b *testing.B) {
	el, err := singleB(b)
	if err != nil {
		b.Fatal(err)
	}
	defer el.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := el.Epoch(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkToken adds signing with the default plain codec.
func BenchmarkToken(b *testing.B) {
	el, err := singleB(b)
	if err != nil {
		b.Fatal(err)
	}
	defer el.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := el.Token(); err != nil {
			b.Fatal(err)
		}
	}
}

func singleB(b *testing.B) (*Election, error) {
	el, err := New(Config{
		ID: "solo", Cluster: testCluster, InMemory: true,
		Transport: transport.NewInmem("solo"), Bootstrap: []Server{{"solo", "solo"}},
		HeartbeatTimeout: testHT, ElectionTimeout: testET, LeaderLeaseTimeout: testLLT,
		Logger: newChecker(testCluster).logger("solo"),
	})
	if err != nil {
		return nil, err
	}
	if _, err := el.WaitLeader(b.Context()); err != nil {
		el.Close()
		return nil, err
	}
	waitFor(b, "the single node's epoch", func() bool { _, err := el.Epoch(); return err == nil })
	return el, nil
}
