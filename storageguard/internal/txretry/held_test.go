package txretry

import (
	"context"
	"errors"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// TestNested: inside a Do's write, a call on the same fence and resource
// is decided against the held epoch (the same runs, an older is refused,
// a newer goes the usual way); another fence, another resource, or a
// context kept past the write holds nothing.
func TestNested(t *testing.T) {
	e := epoch.Epoch{Cluster: "c", Term: 5, Leader: "a"}
	fence, other := new(int), new(int)
	var kept context.Context
	h := NewHeldHold[struct{}](context.Background(), fence, "r", e, func(ctx context.Context) error {
		kept = ctx
		for _, c := range []struct {
			name   string
			fence  any
			res    string
			ep     epoch.Epoch
			ok     bool
			refuse error
		}{
			{"same epoch", fence, "r", e, true, nil},
			{"older", fence, "r", epoch.Epoch{Cluster: "c", Term: 4, Leader: "a"}, true, storageguard.ErrStale},
			{"newer", fence, "r", epoch.Epoch{Cluster: "c", Term: 6, Leader: "b"}, false, nil},
			{"another fence", other, "r", e, false, nil},
			{"another resource", fence, "s", e, false, nil},
		} {
			ok, err := Nested(ctx, c.fence, c.res, c.ep)
			if ok != c.ok || !errors.Is(err, c.refuse) || (c.refuse == nil && err != nil) {
				t.Errorf("%s: Nested = %v, %v; want %v, %v", c.name, ok, err, c.ok, c.refuse)
			}
		}
		return nil
	})
	if err := h.Body(struct{}{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := Nested(kept, fence, "r", e); ok || err != nil {
		t.Fatalf("a context kept past the write: Nested = %v, %v; want false, nil", ok, err)
	}
}
