package election

import (
	"context"
	"testing"

	"github.com/termfence/termfence/epoch"
)

func TestHubSlowSubscriberEndsOnLatest(t *testing.T) {
	var h hub
	h.init()
	h.publish(Leadership{Term: 1, LeaderID: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	slow := h.subscribe(ctx)
	fast := h.subscribe(ctx)
	if l := <-fast; l.Term != 1 {
		t.Fatalf("first value %+v, want the current one (term 1)", l)
	}
	// Nobody reads slow while many changes are published: publish must not
	// block, and slow must end on the latest.
	for term := uint64(2); term <= 100; term++ {
		h.publish(Leadership{Term: term, LeaderID: "b"})
	}
	if l := <-slow; l.Term != 100 {
		t.Fatalf("slow subscriber got %+v, want term 100", l)
	}
	select {
	case l := <-slow:
		t.Fatalf("slow subscriber got a second value %+v", l)
	default:
	}
	// An equal value is not repeated.
	h.publish(Leadership{Term: 100, LeaderID: "b"})
	select {
	case <-slow:
		t.Fatal("an unchanged Leadership was published again")
	default:
	}
	cancel()
	for range slow { // closes when ctx ends
	}
	h.close()
	for range fast {
	}
	if _, ok := <-h.subscribe(context.Background()); ok {
		t.Fatal("subscribe after close returned an open channel")
	}
}

// TestCheckerDetects makes sure the invariant checker the cluster tests
// rely on fails on each kind of violation.
func TestCheckerDetects(t *testing.T) {
	ep := func(term uint64, leader string) epoch.Epoch {
		return epoch.Epoch{Cluster: testCluster, Term: term, Leader: leader}
	}
	for _, tc := range []struct {
		name string
		feed func(c *checker)
	}{
		{"epoch of a term not won", func(c *checker) { c.epoch("poll", "a", ep(3, "a")) }},
		{"two holders of one term", func(c *checker) {
			c.elected("a", 3)
			c.elected("b", 3)
			c.epoch("poll", "a", ep(3, "a"))
			c.epoch("poll", "b", ep(3, "b"))
		}},
		{"epoch going back", func(c *checker) {
			c.elected("a", 3)
			c.elected("a", 5)
			c.epoch("poll", "a", ep(5, "a"))
			c.epoch("poll", "a", ep(3, "a"))
		}},
		{"new leadership not higher", func(c *checker) {
			c.elected("a", 3)
			c.leadership("a", Leadership{Term: 3, LeaderID: "a", Self: true, Epoch: ep(3, "a")})
			c.leadership("a", Leadership{Term: 3, LeaderID: "a", Self: true, Epoch: ep(3, "a")})
		}},
		{"epoch naming another node", func(c *checker) {
			c.elected("a", 3)
			c.epoch("poll", "a", ep(3, "b"))
		}},
		{"epoch without Self", func(c *checker) {
			c.elected("a", 3)
			c.leadership("a", Leadership{Term: 3, LeaderID: "b", Epoch: ep(3, "a")})
		}},
		{"term going back", func(c *checker) {
			c.leadership("a", Leadership{Term: 4})
			c.leadership("a", Leadership{Term: 3})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(testCluster)
			tc.feed(c)
			if len(c.violations()) == 0 {
				t.Fatal("checker found nothing")
			}
		})
	}
	c := newChecker(testCluster)
	c.elected("a", 3)
	c.elected("b", 4)
	c.epoch("poll", "a", ep(3, "a"))
	c.epoch("poll", "a", ep(3, "a"))
	c.leadership("b", Leadership{Term: 4, LeaderID: "b", Self: true, Epoch: ep(4, "b")})
	if v := c.violations(); len(v) != 0 {
		t.Fatalf("checker flagged a valid history: %v", v)
	}
}
