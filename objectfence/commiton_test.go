package objectfence_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/objectfence"
	"github.com/termfence/termfence/storageguard"
)

// TestCommitOnGarbageScenario: M6 = {X6} is committed; the leader of term
// 9 reads M6; the deposed leader of term 7 commits M7 = {Y7} (legal:
// nothing newer yet); Garbage on M7 lists X6, which is deleted. With
// Commit, term 9's {X6, Y9} landed and named a deleted object. CommitOn on
// the version term 9 read refuses it (ErrManifestChanged, nothing
// written); term 9 reads M7 again, commits on it, and every object the
// final manifest names exists.
func TestCommitOnGarbageScenario(t *testing.T) {
	ctx := context.Background()
	st := newStore(t, nil, nil)
	c := server(t).Client()
	prefix := key(t) + "/data/"
	manifest := key(t) + "/MANIFEST"
	e6, e7, e9 := ep("c", 6, "n6"), ep("c", 7, "n7"), ep("c", 9, "n9")
	data := func(e epoch.Epoch) string {
		t.Helper()
		k, err := st.PutData(ctx, prefix, []byte("part of "+e.String()), tok(e))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	x6 := data(e6)
	if _, err := st.CommitOn(ctx, manifest, []byte(x6), tok(e6), nil); err != nil {
		t.Fatalf("first CommitOn (no manifest read): %v", err)
	}
	m6, err := st.Get(ctx, manifest) // the leader of term 9 reads M6
	if err != nil {
		t.Fatal(err)
	}
	y7 := data(e7)
	if _, err := st.CommitOn(ctx, manifest, []byte(y7), tok(e7), &m6); err != nil {
		t.Fatalf("term 7's CommitOn on M6: %v", err)
	}
	m7, err := st.Get(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	live := strings.Split(string(m7.Body), "\n")
	garbage, err := st.Garbage(ctx, prefix, m7.Epoch, func(k string) bool { return slices.Contains(live, k) })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(garbage, []string{x6}) {
		t.Fatalf("Garbage on M7 = %q, want [%q]", garbage, x6)
	}
	for _, k := range garbage {
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)}); err != nil {
			t.Fatal(err)
		}
	}
	y9 := data(e9)
	_, err = st.CommitOn(ctx, manifest, []byte(x6+"\n"+y9), tok(e9), &m6)
	if !errors.Is(err, objectfence.ErrManifestChanged) {
		t.Fatalf("term 9's CommitOn built on M6 after M7 landed = %v, want ErrManifestChanged", err)
	}
	if now, err := st.Get(ctx, manifest); err != nil || now.ETag != m7.ETag {
		t.Fatalf("after the refused CommitOn the manifest is %v (%v), want M7 unchanged", now.ETag, err)
	}
	// Term 9 reads again and builds on M7.
	m7again, err := st.Get(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	next := strings.Split(string(m7again.Body), "\n")
	next = append(next, y9)
	if _, err := st.CommitOn(ctx, manifest, []byte(strings.Join(next, "\n")), tok(e9), &m7again); err != nil {
		t.Fatalf("term 9's CommitOn on M7: %v", err)
	}
	final, err := st.Get(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range strings.Split(string(final.Body), "\n") {
		if _, err := st.Get(ctx, k); err != nil {
			t.Fatalf("the final manifest names %q, which is gone: %v", k, err)
		}
	}
	// The deposed leader of term 7 can no longer commit, whatever it read.
	if _, err := st.CommitOn(ctx, manifest, []byte(y7), tok(e7), &final); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("term 7's CommitOn after term 9's = %v, want ErrStale", err)
	}
}

// TestCommitOnRaceAtTheStore: another Commit lands between CommitOn's
// check of the version and its PUT; the store's condition (If-Match on the
// version read) refuses the PUT, and CommitOn returns ErrManifestChanged
// with the other commit in place.
func TestCommitOnRaceAtTheStore(t *testing.T) {
	ctx := context.Background()
	other := newStore(t, nil, nil)
	manifest := key(t)
	if _, err := other.Commit(ctx, manifest, []byte("v1"), tok(ep("c", 5, "a"))); err != nil {
		t.Fatal(err)
	}
	m, err := other.Get(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	armed := true
	st := newStore(t, nil, func(cfg *objectfence.Config) {
		cfg.Client = interleave{API: cfg.Client, before: func() {
			if !armed {
				return
			}
			armed = false
			if _, err := other.Commit(ctx, manifest, []byte("v2"), tok(ep("c", 5, "a"))); err != nil {
				t.Error(err)
			}
		}}
	})
	if _, err := st.CommitOn(ctx, manifest, []byte("v1 and more"), tok(ep("c", 6, "b")), &m); !errors.Is(err, objectfence.ErrManifestChanged) {
		t.Fatalf("CommitOn with a commit landed before its PUT = %v, want ErrManifestChanged", err)
	}
	if now, err := other.Get(ctx, manifest); err != nil || string(now.Body) != "v2" {
		t.Fatalf("manifest after the race = %q, %v; want the other commit's \"v2\"", now.Body, err)
	}
}

// interleave runs before ahead of each PutObject.
type interleave struct {
	objectfence.API
	before func()
}

func (c interleave) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	c.before()
	return c.API.PutObject(ctx, in, opts...)
}

// TestCommitOnCost: a CommitOn on a manifest Get verified, or on the
// writer's own last commit (Result.Committed), is one request, the
// conditional PUT; a stale one is refused by the store and writes
// nothing. On an Object whose ETag Get did not verify (built by hand),
// CommitOn reads first and refuses a stale one before any PUT.
func TestCommitOnCost(t *testing.T) {
	ctx := context.Background()
	manifest := key(t)
	var puts, heads int
	st := newStore(t, nil, func(cfg *objectfence.Config) {
		cfg.Client = countingPuts{API: countingHeads{API: cfg.Client, n: &heads}, n: &puts}
	})
	r1, err := st.CommitOn(ctx, manifest, []byte("v1"), tok(ep("c", 5, "a")), nil)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := st.Get(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Committed() == nil || r1.Committed().ETag != m1.ETag {
		t.Fatalf("Committed() = %+v, want the manifest at %s", r1.Committed(), m1.ETag)
	}
	puts, heads = 0, 0
	r2, err := st.CommitOn(ctx, manifest, []byte("v2"), tok(ep("c", 5, "a")), &m1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CommitOn(ctx, manifest, []byte("v3"), tok(ep("c", 5, "a")), r2.Committed()); err != nil {
		t.Fatalf("CommitOn on the writer's own last commit: %v", err)
	}
	if puts != 2 || heads != 0 {
		t.Fatalf("two CommitOns on verified versions sent %d PUTs and %d HEADs, want 2 and 0", puts, heads)
	}
	for _, read := range []*objectfence.Object{&m1, r1.Committed(), nil} {
		if _, err := st.CommitOn(ctx, manifest, []byte("stale"), tok(ep("c", 6, "b")), read); !errors.Is(err, objectfence.ErrManifestChanged) {
			t.Fatalf("CommitOn on a stale version = %v, want ErrManifestChanged", err)
		}
	}
	byHand := &objectfence.Object{Key: manifest, ETag: m1.ETag, Epoch: m1.Epoch}
	puts = 0
	if _, err := st.CommitOn(ctx, manifest, []byte("stale"), tok(ep("c", 6, "b")), byHand); !errors.Is(err, objectfence.ErrManifestChanged) || puts != 0 {
		t.Fatalf("CommitOn on an unverified stale version = %v after %d PUTs, want ErrManifestChanged before any", err, puts)
	}
	if now, err := st.Get(ctx, manifest); err != nil || string(now.Body) != "v3" {
		t.Fatalf("manifest = %q, %v; want \"v3\"", now.Body, err)
	}
}

// countingHeads counts the HeadObject calls that reach the store.
type countingHeads struct {
	objectfence.API
	n *int
}

func (c countingHeads) HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	*c.n++
	return c.API.HeadObject(ctx, in, opts...)
}

// TestGetTornETag: a GET whose ETag is not the MD5 of the bytes it
// returned (versitygw's posix backend reads them one after the other, by
// path: one write's ETag with another's body) is read again; a store that
// keeps tearing gets ErrContention, never an Object whose ETag names
// another write than its body. The old Get returned the pair as it came.
func TestGetTornETag(t *testing.T) {
	ctx := context.Background()
	k := key(t)
	writer := newStore(t, nil, nil)
	if _, err := writer.Put(ctx, k, []byte("first"), tok(ep("c", 1, "a"))); err != nil {
		t.Fatal(err)
	}
	other, err := writer.Put(ctx, key(t), []byte("another write"), tok(ep("c", 1, "a")))
	if err != nil {
		t.Fatal(err)
	}
	tears := 1
	st := newStore(t, nil, func(cfg *objectfence.Config) {
		cfg.Client = tearing{API: cfg.Client, etag: other.ETag, left: &tears}
	})
	o, err := st.Get(ctx, k)
	if err != nil || string(o.Body) != "first" || o.ETag == other.ETag {
		t.Fatalf("Get after one torn read = %q at %s, %v; want \"first\" at its own ETag", o.Body, o.ETag, err)
	}
	tears = 1 << 30
	if o, err := st.Get(ctx, k); !errors.Is(err, objectfence.ErrContention) {
		t.Fatalf("Get on a store that always tears = %q at %s, %v; want ErrContention", o.Body, o.ETag, err)
	}
}

// tearing answers GetObject with etag in place of the object's own, left
// times.
type tearing struct {
	objectfence.API
	etag string
	left *int
}

func (c tearing) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	out, err := c.API.GetObject(ctx, in, opts...)
	if err == nil && *c.left > 0 {
		*c.left--
		out.ETag = aws.String(c.etag)
	}
	return out, err
}
