package objectfence

import (
	"errors"
	"strings"
	"testing"

	"github.com/termfence/termfence/storageguard"
)

// TestValidKeyCanonical: keys that a store mapping keys to file paths
// (versitygw's posix backend) reads as another key's file are refused
// with ErrBadResource, saying which rule; canonical keys pass. The old
// check passed every aliased spelling, and an older epoch's Put under one
// of them landed after a newer one's under another.
func TestValidKeyCanonical(t *testing.T) {
	for _, k := range []string{"p//x", "p/./x", "/p/x", "p/q/../x", "p/x/", ".", "..", "./p", "p/..", "/", "//", ""} {
		err := validKey(k)
		if !errors.Is(err, storageguard.ErrBadResource) {
			t.Errorf("validKey(%q) = %v, want ErrBadResource", k, err)
			continue
		}
		if k != "" && !strings.Contains(err.Error(), "canonical") {
			t.Errorf("validKey(%q) = %v: the refusal does not say which rule", k, err)
		}
	}
	for _, k := range []string{"p/x", "x", "p/q/x", "p/.x", "p/..x", "p/x.", "a b/c", "p/x...y", strings.Repeat("a", 1024)} {
		if err := validKey(k); err != nil {
			t.Errorf("validKey(%q) = %v, want nil: a canonical key", k, err)
		}
	}
}
