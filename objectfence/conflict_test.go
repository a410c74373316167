package objectfence_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/objectfence"
)

// TestPermanentConflictNotContention: a 409 whose code says retrying
// cannot help — versitygw's ExistingObjectIsDirectory, for a key that
// names a directory of its posix backend — is returned at once with the
// store's code, not retried as a lost race and reported as
// ErrContention (the old Put took every 409 for contention and tried
// Config.MaxAttempts times).
func TestPermanentConflictNotContention(t *testing.T) {
	c := server(t).Client()
	ctx := context.Background()
	dir := key(t)
	// An object below dir makes dir a directory on the posix backend.
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(dir + "/inside"), Body: bytes.NewReader([]byte("x"))}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	st := newStore(t, nil, func(cfg *objectfence.Config) {
		cfg.Client = countingPuts{API: cfg.Client, n: &calls}
	})
	_, err := st.Put(ctx, dir, []byte("body"), tok(ep("c", 3, "a")))
	if err == nil {
		t.Fatal("Put over a directory succeeded")
	}
	if errors.Is(err, objectfence.ErrContention) {
		t.Fatalf("Put over a directory = %v: a permanent 409 reported as contention", err)
	}
	var ae interface{ ErrorCode() string }
	if !errors.As(err, &ae) || ae.ErrorCode() != "ExistingObjectIsDirectory" {
		t.Fatalf("Put over a directory = %v, want the store's ExistingObjectIsDirectory", err)
	}
	if calls != 1 {
		t.Fatalf("Put over a directory sent %d PUTs, want 1: a permanent conflict is not retried", calls)
	}
}

// countingPuts counts the PutObject calls that reach the store.
type countingPuts struct {
	objectfence.API
	n *int
}

func (c countingPuts) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	*c.n++
	return c.API.PutObject(ctx, in, opts...)
}
