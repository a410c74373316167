package testwait

import (
	"testing"
	"time"
)

func TestBoundNeverShrinks(t *testing.T) {
	if f := Factor(); f < 1 || f > 1e6 {
		t.Fatalf("Factor() = %v", f)
	}
	for _, d := range []time.Duration{0, time.Millisecond, 10 * time.Second} {
		if b := Bound(d); b < d {
			t.Errorf("Bound(%v) = %v", d, b)
		}
	}
	t.Logf("factor on this machine now: %.2f", Factor())
}
