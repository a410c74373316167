package hostile

import (
	"math/rand"
	"reflect"
	"testing"
)

func view() View {
	return View{
		Members:   []Peer{{"n1", "127.0.0.1:7001", true}, {"n2", "127.0.0.1:7002", true}, {"n3", "127.0.0.1:7003", false}},
		Self:      "127.0.0.1:9",
		Term:      func(int) uint64 { return 7 },
		LastIndex: func(int) uint64 { return 40 },
		Leader:    func() int { return 0 },
	}
}

func TestAttacks(t *testing.T) {
	as := Attacks(view())
	if len(as) != NumAttacks {
		t.Fatalf("%d attacks, NumAttacks is %d", len(as), NumAttacks)
	}
	for i := range NumAttacks {
		ops := Generate(AttackSeed(i), view())
		if len(ops) == 0 || ops[0].Name != as[i].Name {
			t.Errorf("AttackSeed(%d) does not start with %q", i, as[i].Name)
		}
	}
}

// TestGenerate: deterministic, never empty, never panics, every kind
// reached.
func TestGenerate(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	kinds := map[Kind]bool{}
	for range 2000 {
		b := make([]byte, rng.Intn(300))
		rng.Read(b)
		a, c := Generate(b, view()), Generate(b, view())
		if len(a) == 0 || !reflect.DeepEqual(a, c) {
			t.Fatalf("Generate(%x): %d ops, deterministic %v", b, len(a), reflect.DeepEqual(a, c))
		}
		for _, op := range a {
			kinds[op.Kind] = true
		}
	}
	for _, k := range []Kind{AppendEntries, RequestVote, InstallSnapshot, TimeoutNow, RequestPreVote, Raw} {
		if !kinds[k] {
			t.Errorf("kind %d never generated", k)
		}
	}
}
