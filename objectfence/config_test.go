package objectfence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/objectfence"
	"github.com/termfence/termfence/storageguard"
)

func TestConfigValidate(t *testing.T) {
	c := &s3.Client{}
	for _, cfg := range []objectfence.Config{
		{Bucket: "b"},
		{Client: c},
		{Client: c, Bucket: string(make([]byte, 256))},
		{Client: c, Bucket: "b", MaxAttempts: -1},
		{Client: c, Bucket: "b", MaxGet: -1},
		{Client: c, Bucket: "b", Cluster: "bad cluster"},
	} {
		if _, err := objectfence.New(cfg); !errors.Is(err, storageguard.ErrBadConfig) {
			t.Errorf("New(%+v): %v, want ErrBadConfig", cfg, err)
		}
	}
	if _, err := objectfence.New(objectfence.Config{Client: c, Bucket: "b", Cluster: "c"}); err != nil {
		t.Fatal(err)
	}
}

// TestContention: a writer that loses every conditional write gives up
// after MaxAttempts with ErrContention, having written nothing.
func TestContention(t *testing.T) {
	k := key(t)
	e := ep("c", 1, "a")
	other := newStore(t, nil, nil)
	mustPut(t, other, k, "v0", e)
	h := &hooked{API: server(t).Client()}
	n := 0
	// Before each of its PUTs, another writer of the same epoch gets in.
	h.beforePut = func(ctx context.Context, _ *s3.PutObjectInput) {
		n++
		mustPut(t, other, k, "other", e)
	}
	st := newStore(t, h, func(c *objectfence.Config) { c.MaxAttempts = 3 })
	_, err := st.Put(context.Background(), k, []byte("mine"), tok(e))
	if !errors.Is(err, objectfence.ErrContention) {
		t.Fatalf("Put: %v, want ErrContention", err)
	}
	if n != 3 {
		t.Fatalf("%d conditional writes, want MaxAttempts=3", n)
	}
	wantObject(t, other, k, "other", e)
}

// TestCancelled: a Put whose context has ended sends nothing.
func TestCancelled(t *testing.T) {
	k := key(t)
	h := &hooked{API: server(t).Client()}
	st := newStore(t, h, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := st.Put(ctx, k, []byte("x"), tok(ep("c", 1, "a"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context: %v", err)
	}
	if h.puts.Load() != 0 {
		t.Fatalf("%d PUTs sent", h.puts.Load())
	}
	if headETag(t, k) != "" {
		t.Fatal("the object exists")
	}
}

// TestUnfencedObjectIsAdopted: an object written around the package has no
// epoch; any epoch may write over it, and from then on it is fenced.
func TestUnfencedObjectIsAdopted(t *testing.T) {
	ctx := context.Background()
	k := key(t)
	if _, err := server(t).Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: nil}); err != nil {
		t.Fatal(err)
	}
	st := newStore(t, nil, nil)
	if _, err := st.Get(ctx, k); !errors.Is(err, objectfence.ErrNotFenced) {
		t.Fatalf("Get of an unfenced object: %v, want ErrNotFenced", err)
	}
	r := mustPut(t, st, k, "fenced now", ep("c", 4, "a"))
	if r.Replaced == "" || !r.Previous.IsZero() {
		t.Fatalf("Put over an unfenced object: %+v", r)
	}
	if _, err := st.Put(ctx, k, []byte("x"), tok(ep("c", 3, "a"))); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("older epoch after adoption: %v, want ErrStale", err)
	}
}
