package objectfence_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/objectfence"
)

// hostileValues returns epoch metadata values that are not valid epochs:
// near misses first, then random printable strings.
func hostileValues(rng *rand.Rand, n int) []string {
	vs := []string{
		"c/01/a", "c/0/a", "c//a", "c/1/", "/1/a", "c/1/a/b", "c/1", "c", "c/-1/a", "c/+1/a",
		"c/18446744073709551616/a", "c/281474976710657/a", "c/1/a b", "c/1/é",
		strings.Repeat("c", 65) + "/1/a", "c/1/" + strings.Repeat("a", 300),
		strings.Repeat("x", 2000),
	}
	const chars = "abcAZ09._-/ +%:;\"'\\*?=~"
	for len(vs) < n {
		b := make([]byte, 1+rng.IntN(80))
		for i := range b {
			if rng.IntN(4) == 0 {
				b[i] = byte(0x21 + rng.IntN(0x7e-0x21+1))
			} else {
				b[i] = chars[rng.IntN(len(chars))]
			}
		}
		vs = append(vs, string(b))
	}
	return vs
}

// TestHostileMetadata writes objects around the package whose epoch
// metadata is malformed, and checks that Put and Delete refuse to write
// over them (the object stays as it was) and Get refuses to return them,
// with ErrBadObject, never a panic or an accepted write.
func TestHostileMetadata(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	c := server(t).Client()
	st := newStore(t, nil, nil)
	ctx := context.Background()
	e := ep("c", 1<<40, "a") // a huge term: everything else would be older
	tested := 0
	for _, v := range hostileValues(rng, 60) {
		if _, err := epoch.Parse(strings.TrimSpace(v)); err == nil {
			continue
		}
		k := key(t)
		_, err := c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader("hostile"),
			Metadata: map[string]string{objectfence.MetaEpoch: v},
		})
		if err != nil {
			t.Logf("the store refused metadata %q itself: %v", v, err)
			continue
		}
		h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)})
		if err != nil {
			t.Fatal(err)
		}
		if _, kept := h.Metadata[objectfence.MetaEpoch]; !kept {
			t.Logf("the store dropped metadata %q: the object is unfenced", v)
			continue
		}
		tested++
		before := aws.ToString(h.ETag)
		if _, err := st.Put(ctx, k, []byte("over"), tok(e)); !errors.Is(err, objectfence.ErrBadObject) {
			t.Fatalf("Put over metadata %q: %v, want ErrBadObject", v, err)
		}
		if _, err := st.Delete(ctx, k, tok(e)); !errors.Is(err, objectfence.ErrBadObject) {
			t.Fatalf("Delete over metadata %q: %v, want ErrBadObject", v, err)
		}
		if _, err := st.Get(ctx, k); !errors.Is(err, objectfence.ErrBadObject) {
			t.Fatalf("Get of metadata %q: %v, want ErrBadObject", v, err)
		}
		if got := headETag(t, k); got != before {
			t.Fatalf("object with metadata %q changed: ETag %q, was %q", v, got, before)
		}
	}
	if tested < 20 {
		t.Fatalf("only %d hostile values reached the store intact", tested)
	}
	t.Logf("%d hostile metadata values refused", tested)
}

// TestHostileBody: valid epoch metadata over bytes that are not a fenced
// object's (no header, a header that disagrees, a marker with a payload,
// random bytes): Get refuses them with ErrBadObject.
func TestHostileBody(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), 3))
	c := server(t).Client()
	st := newStore(t, nil, nil)
	ctx := context.Background()
	e := ep("c", 9, "a")
	nonce := strings.Repeat("0", 32)
	bodies := [][]byte{
		[]byte("no header"),
		[]byte(objectfence.Magic + " c/8/a " + nonce + " data\nolder epoch in the bytes"),
		[]byte(objectfence.Magic + " c/9/a " + nonce + " deleted\npayload on a marker"),
		[]byte(objectfence.Magic + " c/9/a " + nonce + " data"),
		[]byte(objectfence.Magic + " c/9/a zz data\n"),
		append([]byte(objectfence.Magic+" "), bytes.Repeat([]byte("c"), 1000)...),
	}
	for i := 0; i < 20; i++ {
		b := make([]byte, rng.IntN(600))
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		if rng.IntN(2) == 0 {
			b = append([]byte(objectfence.Magic+" "), b...)
		}
		bodies = append(bodies, b)
	}
	for _, b := range bodies {
		k := key(t)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(k), Body: bytes.NewReader(b),
			Metadata: map[string]string{objectfence.MetaEpoch: e.String()},
		}); err != nil {
			t.Fatal(err)
		}
		if o, err := st.Get(ctx, k); !errors.Is(err, objectfence.ErrBadObject) {
			t.Fatalf("Get of bytes %q: %+v, %v; want ErrBadObject", b, o, err)
		}
	}
}
