package objectfence_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/objectfence"
	"github.com/termfence/termfence/storageguard"
)

// TestTornSecondHead: two HEADs are trusted only when they report one
// ETag. Here the first HEAD reads the older object whole (before the newer
// write landed) and the second is torn as the newer write lands: the newer
// ETag with the older epoch. Two HEADs that merely both found an object
// would pair that ETag with the older epoch, and a write conditioned on it
// would land over the newer epoch; with two ETags that differ, the store
// reads again and refuses the older epoch.
func TestTornSecondHead(t *testing.T) {
	k, old, new, b, srvClient, first := tornSetup(t)
	torn := &tornSecond{API: srvClient, first: first}
	a := newStore(t, torn, func(c *objectfence.Config) { c.CacheSize = -1 })
	if _, err := a.Put(context.Background(), k, []byte("late"), tok(old)); !errors.Is(err, storageguard.ErrStale) {
		t.Fatalf("Put after a whole HEAD of the older object and a torn one: %v, want ErrStale", err)
	}
	if n := torn.n.Load(); n < 3 {
		t.Fatalf("%d HEADs, want the older object's, the torn one and another", n)
	}
	wantObject(t, b, k, "B", new)
}

// tornSecond answers its first HEAD with first (the older object, read
// whole) and its second with the current ETag and first's metadata.
type tornSecond struct {
	objectfence.API
	first *s3.HeadObjectOutput
	n     atomicCount
}

func (h *tornSecond) HeadObject(ctx context.Context, in *s3.HeadObjectInput, o ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	switch h.n.Add(1) {
	case 1:
		return h.first, nil
	case 2:
		out, err := h.API.HeadObject(ctx, in, o...)
		if err == nil {
			out.Metadata = h.first.Metadata
		}
		return out, err
	}
	return h.API.HeadObject(ctx, in, o...)
}
