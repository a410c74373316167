package objectfence_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
)

// TestManifest: the manifest pattern. A deposed writer's data uploads land
// but its Commit is refused, so they are never named; Garbage lists them
// (and the superseded writer's old ones), never the committed ones, nor
// uploads of the committed term or newer that may still be committed.
func TestManifest(t *testing.T) {
	ctx := context.Background()
	st := newStore(t, nil, nil)
	prefix := key(t) + "/data/"
	manifest := key(t) + "/MANIFEST"
	a, b, c := ep("c", 3, "a"), ep("c", 4, "b"), ep("c", 5, "c")

	put := func(e epoch.Epoch) string {
		t.Helper()
		k, err := st.PutData(ctx, prefix, []byte("part of "+e.String()), tok(e))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a1, a2 := put(a), put(a)
	if _, err := st.Commit(ctx, manifest, []byte(a1+"\n"+a2), tok(a)); err != nil {
		t.Fatal(err)
	}
	b1 := put(b)
	if _, err := st.Commit(ctx, manifest, []byte(b1), tok(b)); err != nil {
		t.Fatal(err)
	}
	aLate := put(a) // the deposed writer goes on uploading...
	if _, err := st.Commit(ctx, manifest, []byte(a1+"\n"+aLate), tok(a)); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("deposed writer's Commit: %v, want ErrStale", err)
	}
	bPending := put(b) // b's next upload, not committed yet
	cEarly := put(c)   // a newer writer's first upload

	m, err := st.Get(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	if m.Epoch != b || string(m.Body) != b1 {
		t.Fatalf("manifest = %q under %s, want b's", m.Body, m.Epoch)
	}
	live := strings.Split(string(m.Body), "\n")
	// A key under the prefix not named as PutData names it is left alone.
	mustPut(t, st, prefix+"not-a-data-object", "x", a)
	got, err := st.Garbage(ctx, prefix, m.Epoch, func(k string) bool { return slices.Contains(live, k) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{a1, a2, aLate}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Garbage = %q, want %q (not %q, %q, %q)", got, want, b1, bPending, cEarly)
	}
	for _, k := range append(got, b1) {
		if _, err := st.Get(ctx, k); err != nil {
			t.Fatalf("Get data object %q: %v", k, err)
		}
	}
}
