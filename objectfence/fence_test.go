package objectfence_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/objectfence"
	"github.com/termfence/termfence/storageguard"
)

// mustPut writes and fails tb on error.
func mustPut(tb testing.TB, st *objectfence.Store, k string, body string, e epoch.Epoch) objectfence.Result {
	tb.Helper()
	res, err := st.Put(context.Background(), k, []byte(body), tok(e))
	if err != nil {
		tb.Fatalf("Put %q under %s: %v", k, e, err)
	}
	return res
}

// wantObject fails tb unless k holds body under e.
func wantObject(tb testing.TB, st *objectfence.Store, k, body string, e epoch.Epoch) {
	tb.Helper()
	o, err := st.Get(context.Background(), k)
	if err != nil {
		tb.Fatalf("Get %q: %v", k, err)
	}
	if string(o.Body) != body || o.Epoch != e {
		tb.Fatalf("Get %q = %q under %s, want %q under %s", k, o.Body, o.Epoch, body, e)
	}
}

func TestPutGet(t *testing.T) {
	st := newStore(t, nil, nil)
	k := key(t)
	e3 := ep("c", 3, "a")
	r := mustPut(t, st, k, "one", e3)
	if r.Replaced != "" || r.ETag == "" || r.Previous != (epoch.Epoch{}) {
		t.Fatalf("first Put: %+v", r)
	}
	wantObject(t, st, k, "one", e3)
	r2 := mustPut(t, st, k, "two", e3)
	if r2.Replaced != r.ETag {
		t.Fatalf("second Put replaced %q, want %q", r2.Replaced, r.ETag)
	}
	if got := headETag(t, k); got != r2.ETag {
		t.Fatalf("server ETag %q, Put reported %q", got, r2.ETag)
	}
	if h, err := st.Highest(context.Background(), k); err != nil || h != e3 {
		t.Fatalf("Highest = %v, %v", h, err)
	}
	if _, err := st.Get(context.Background(), key(t)); !errors.Is(err, objectfence.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
}

// TestRefusals: stale, conflicting, foreign, forged, unsigned, malformed
// and missing tokens are refused and change nothing.
func TestRefusals(t *testing.T) {
	codec, err := epoch.NewHMAC(bytes.Repeat([]byte("k"), 32))
	if err != nil {
		t.Fatal(err)
	}
	other, err := epoch.NewHMAC(bytes.Repeat([]byte("x"), 32))
	if err != nil {
		t.Fatal(err)
	}
	sign := func(c epoch.Signer, e epoch.Epoch) string {
		s, err := c.Sign(e)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	st := newStore(t, nil, func(c *objectfence.Config) { c.Verifier = codec })
	strict := newStore(t, nil, func(c *objectfence.Config) { c.Verifier = codec; c.Cluster = "c" })
	k := key(t)
	e5 := ep("c", 5, "a")
	if _, err := st.Put(context.Background(), k, []byte("good"), sign(codec, e5)); err != nil {
		t.Fatal(err)
	}
	before := headETag(t, k)
	cases := []struct {
		name  string
		store *objectfence.Store
		token string
		want  error
	}{
		{"stale", st, sign(codec, ep("c", 4, "a")), storageguard.ErrStale},
		{"conflict", st, sign(codec, ep("c", 5, "b")), storageguard.ErrConflict},
		{"foreign at the object", st, sign(codec, ep("d", 9, "a")), storageguard.ErrForeignCluster},
		{"foreign at the guard", strict, sign(codec, ep("d", 9, "a")), storageguard.ErrForeignCluster},
		{"forged", st, sign(other, ep("c", 1<<40, "a")), storageguard.ErrUnauthenticated},
		{"unsigned", st, tok(ep("c", 1<<40, "a")), storageguard.ErrUnauthenticated},
		{"malformed", st, "c/x/a", epoch.ErrMalformed},
		{"missing", st, "", storageguard.ErrUnauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.store.Put(context.Background(), k, []byte("bad"), tc.token)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Put: %v, want %v", err, tc.want)
			}
			_, err = tc.store.Delete(context.Background(), k, tc.token)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Delete: %v, want %v", err, tc.want)
			}
			if got := headETag(t, k); got != before {
				t.Fatalf("object changed by a refused write: ETag %q, was %q", got, before)
			}
		})
	}
	var se *storageguard.StaleError
	_, err = st.Put(context.Background(), k, []byte("bad"), sign(codec, ep("c", 4, "a")))
	if !errors.As(err, &se) || se.Highest != e5 || se.Resource != k {
		t.Fatalf("stale refusal %v does not name the highest epoch %s", err, e5)
	}
	for _, bad := range []string{"", string(make([]byte, 1025)), "\xff"} {
		if _, err := st.Put(context.Background(), bad, nil, sign(codec, e5)); !errors.Is(err, storageguard.ErrBadResource) {
			t.Fatalf("Put to key %q: %v, want ErrBadResource", bad, err)
		}
	}
}

// TestPausedWriter: a writer paused between its read and its conditional
// write while a newer epoch writes is refused when it resumes.
func TestPausedWriter(t *testing.T) {
	for _, sameBytes := range []bool{false, true} {
		name := "other bytes"
		if sameBytes {
			// The newer writer writes the very bytes the paused one read:
			// with the ETag a hash of the bytes, only the epoch in the
			// stored bytes keeps the paused writer's If-Match from
			// matching (ABA; fails with the epoch in the metadata alone).
			name = "same bytes"
		}
		t.Run(name, func(t *testing.T) {
			k := key(t)
			old, new := ep("c", 5, "a"), ep("c", 6, "b")
			p := newPauser()
			h := &hooked{API: server(t).Client()}
			a := newStore(t, h, func(c *objectfence.Config) { c.CacheSize = -1 })
			b := newStore(t, nil, nil)
			mustPut(t, b, k, "v0", old)
			h.beforePut = p.hook
			done := make(chan error, 1)
			go func() {
				_, err := a.Put(context.Background(), k, []byte("late"), tok(old))
				done <- err
			}()
			<-p.reached
			body := "B"
			if sameBytes {
				body = "v0"
			}
			mustPut(t, b, k, body, new)
			close(p.released)
			if err := <-done; !errors.Is(err, storageguard.ErrStale) {
				t.Fatalf("paused writer's Put: %v, want ErrStale", err)
			}
			wantObject(t, b, k, body, new)
		})
	}
}

// TestTornHead: a HEAD that pairs an older write's epoch with the current
// ETag (versitygw's posix backend reads the metadata and then the ETag, by
// path, so a write between the two tears them) must not let the older
// epoch write: the decision waits for two HEADs with one ETag.
func TestTornHead(t *testing.T) {
	k, old, new, b, srvClient, first := tornSetup(t)
	torn := &tornOnce{API: srvClient, staleMeta: first.Metadata}
	a := newStore(t, torn, func(c *objectfence.Config) { c.CacheSize = -1 })
	if _, err := a.Put(context.Background(), k, []byte("late"), tok(old)); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Put after a torn HEAD: %v, want ErrStale", err)
	}
	if torn.n.Load() < 2 {
		t.Fatalf("%d HEADs, want the torn one and another", torn.n.Load())
	}
	wantObject(t, b, k, "B", new)
}

// tornSetup writes an object under epoch 5, reads its HEAD, and writes it
// again under epoch 6: the key, both epochs, the writing store, a plain
// client of the server and the older object's HEAD, for a torn-HEAD test.
func tornSetup(t *testing.T) (k string, old, new epoch.Epoch, b *objectfence.Store, srvClient *s3.Client, first *s3.HeadObjectOutput) {
	t.Helper()
	k = key(t)
	old, new = ep("c", 5, "a"), ep("c", 6, "b")
	b = newStore(t, nil, nil)
	mustPut(t, b, k, "v0", old)
	srvClient = server(t).Client()
	first, err := srvClient.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, b, k, "B", new)
	return k, old, new, b, srvClient, first
}

// tornOnce answers its first HEAD with the current ETag but the metadata
// of an older write.
type tornOnce struct {
	objectfence.API
	staleMeta map[string]string
	n         atomicCount
}

func (h *tornOnce) HeadObject(ctx context.Context, in *s3.HeadObjectInput, o ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	out, err := h.API.HeadObject(ctx, in, o...)
	if h.n.Add(1) == 1 && err == nil {
		out.Metadata = h.staleMeta
	}
	return out, err
}

func TestDelete(t *testing.T) {
	st := newStore(t, nil, nil)
	k := key(t)
	e5, e6 := ep("c", 5, "a"), ep("c", 6, "b")
	mustPut(t, st, k, "v", e5)
	if _, err := st.Delete(context.Background(), k, tok(e6)); err != nil {
		t.Fatal(err)
	}
	var de *objectfence.DeletedError
	if _, err := st.Get(context.Background(), k); !errors.As(err, &de) || de.Epoch != e6 || !errors.Is(err, objectfence.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want a DeletedError under %s", err, e6)
	}
	// The marker keeps the key's epoch: the deposed writer cannot create
	// the object again, as it could after a real DELETE.
	if _, err := st.Put(context.Background(), k, []byte("late"), tok(e5)); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Put under the older epoch after Delete: %v, want ErrStale", err)
	}
	mustPut(t, st, k, "again", e6)
	wantObject(t, st, k, "again", e6)
}

// TestConditionalDeleteOnVersitygw records what versitygw v1.8.0 does with
// If-Match on DELETE: it answers a mismatch with 412 and keeps the object.
// (Its posix backend checks the ETag outside the lock that orders PUTs, so
// the check and the removal are not one step; objectfence does not rely on
// it: Delete writes a deletion marker with a conditional PUT.)
func TestConditionalDeleteOnVersitygw(t *testing.T) {
	st := newStore(t, nil, nil)
	k := key(t)
	mustPut(t, st, k, "v", ep("c", 1, "a"))
	c := server(t).Client()
	_, err := c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), IfMatch: aws.String(`"0123456789abcdef0123456789abcdef"`)})
	var re interface{ HTTPStatusCode() int }
	if !errors.As(err, &re) || re.HTTPStatusCode() != 412 {
		t.Fatalf("DELETE with a wrong If-Match: %v, want 412", err)
	}
	if headETag(t, k) == "" {
		t.Fatal("DELETE with a wrong If-Match removed the object")
	}
}

// TestCachedETag: a single writer's next Put of a key sends no HEAD; when
// another writer changed the key, the 412 sends it back to reading.
func TestCachedETag(t *testing.T) {
	h := &hooked{API: server(t).Client()}
	a := newStore(t, h, nil)
	b := newStore(t, nil, nil)
	k := key(t)
	e := ep("c", 2, "a")
	mustPut(t, a, k, "1", e)
	heads := h.heads.Load()
	r := mustPut(t, a, k, "2", e)
	if got := h.heads.Load() - heads; got != 0 || !r.Cached || r.Attempts != 1 {
		t.Fatalf("second Put by the same writer: %d HEADs, %+v; want no HEAD, cached", got, r)
	}
	mustPut(t, b, k, "other", ep("c", 3, "b"))
	// a's cache names its own last write, now replaced: the conditional
	// write fails, a reads, sees term 3 and refuses its term 2.
	if _, err := a.Put(context.Background(), k, []byte("3"), tok(e)); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Put with a stale cache entry: %v, want ErrStale", err)
	}
	wantObject(t, b, k, "other", ep("c", 3, "b"))
}
