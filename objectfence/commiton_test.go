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
	if _, err := st.CommitOn(ctx, manifest, []byte(x6), tok(e6), ""); err != nil {
		t.Fatalf("first CommitOn (no manifest read): %v", err)
	}
	m6, err := st.Get(ctx, manifest) // the leader of term 9 reads M6
	if err != nil {
		t.Fatal(err)
	}
	y7 := data(e7)
	if _, err := st.CommitOn(ctx, manifest, []byte(y7), tok(e7), m6.ETag); err != nil {
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
	_, err = st.CommitOn(ctx, manifest, []byte(x6+"\n"+y9), tok(e9), m6.ETag)
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
	if _, err := st.CommitOn(ctx, manifest, []byte(strings.Join(next, "\n")), tok(e9), m7again.ETag); err != nil {
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
	if _, err := st.CommitOn(ctx, manifest, []byte(y7), tok(e7), final.ETag); !errors.Is(err, storageguard.ErrStale) {
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
	if _, err := st.CommitOn(ctx, manifest, []byte("v1 and more"), tok(ep("c", 6, "b")), m.ETag); !errors.Is(err, objectfence.ErrManifestChanged) {
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

// TestCommitOnStaleReadSendsNoPut: a CommitOn on a version that is no
// longer current is refused from its read, before any PUT reaches the
// store; so is one that read no manifest where there is one.
func TestCommitOnStaleReadSendsNoPut(t *testing.T) {
	ctx := context.Background()
	manifest := key(t)
	puts := 0
	st := newStore(t, nil, func(cfg *objectfence.Config) { cfg.Client = countingPuts{API: cfg.Client, n: &puts} })
	if _, err := st.CommitOn(ctx, manifest, []byte("v1"), tok(ep("c", 5, "a")), ""); err != nil {
		t.Fatal(err)
	}
	m1, err := st.Get(ctx, manifest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CommitOn(ctx, manifest, []byte("v2"), tok(ep("c", 5, "a")), m1.ETag); err != nil {
		t.Fatal(err)
	}
	puts = 0
	for _, read := range []string{m1.ETag, ""} {
		if _, err := st.CommitOn(ctx, manifest, []byte("v3"), tok(ep("c", 6, "b")), read); !errors.Is(err, objectfence.ErrManifestChanged) {
			t.Fatalf("CommitOn on read %q = %v, want ErrManifestChanged", read, err)
		}
	}
	if puts != 0 {
		t.Fatalf("refused CommitOns sent %d PUTs, want none", puts)
	}
}
