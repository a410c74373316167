package objectfence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/s3server"
	"github.com/termfence/termfence/objectfence"
)

const bucket = "fenced"

var (
	srvOnce sync.Once
	srv     *s3server.Server
	srvErr  error
)

// server returns the versitygw all tests of the package share (started on
// first use; each test writes keys of its own), or skips tb when versitygw
// is not installed.
func server(tb testing.TB) *s3server.Server {
	tb.Helper()
	if _, err := s3server.Find(); err != nil {
		tb.Skipf("skipping: no S3 server to test against: %v", err)
	}
	srvOnce.Do(func() {
		dir, err := tempDir()
		if err != nil {
			srvErr = err
			return
		}
		srv, srvErr = s3server.Start(context.Background(), dir, bucket)
	})
	if srvErr != nil {
		tb.Fatal(srvErr)
	}
	return srv
}

var keySeq atomic.Int64

// key returns a key no other test uses.
func key(tb testing.TB) string {
	return fmt.Sprintf("%s/%d", tb.Name(), keySeq.Add(1))
}

func ep(cluster string, term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: cluster, Term: term, Leader: leader}
}

// tok is the unsigned token of an epoch (Config.Verifier nil).
func tok(e epoch.Epoch) string {
	t, err := epoch.Plain().Sign(e)
	if err != nil {
		panic(err)
	}
	return t
}

// newStore returns a Store on the shared server through api (the
// server's client if nil).
func newStore(tb testing.TB, api objectfence.API, mod func(*objectfence.Config)) *objectfence.Store {
	tb.Helper()
	s := server(tb)
	if api == nil {
		api = s.Client()
	}
	cfg := objectfence.Config{Client: api, Bucket: bucket, Verifier: epoch.Plain()}
	if mod != nil {
		mod(&cfg)
	}
	st, err := objectfence.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// headETag returns the key's ETag as the server reports it ("" if none).
func headETag(tb testing.TB, k string) string {
	tb.Helper()
	out, err := server(tb).Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)})
	if err != nil {
		var re interface{ HTTPStatusCode() int }
		if errors.As(err, &re) && re.HTTPStatusCode() == 404 {
			return ""
		}
		tb.Fatal(err)
	}
	return aws.ToString(out.ETag)
}

// hooked wraps an API: before each PutObject it calls beforePut (if set),
// and it counts requests.
type hooked struct {
	objectfence.API
	beforePut func(ctx context.Context, in *s3.PutObjectInput)
	heads     atomic.Int64
	puts      atomic.Int64
}

func (h *hooked) HeadObject(ctx context.Context, in *s3.HeadObjectInput, o ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	h.heads.Add(1)
	return h.API.HeadObject(ctx, in, o...)
}

func (h *hooked) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	h.puts.Add(1)
	if h.beforePut != nil {
		h.beforePut(ctx, in)
	}
	return h.API.PutObject(ctx, in, o...)
}

// pauser blocks the first PutObject it sees until released: a writer
// paused between its read and its conditional write.
type pauser struct {
	once     sync.Once
	reached  chan struct{}
	released chan struct{}
}

func newPauser() *pauser {
	return &pauser{reached: make(chan struct{}), released: make(chan struct{})}
}

func (p *pauser) hook(ctx context.Context, _ *s3.PutObjectInput) {
	first := false
	p.once.Do(func() { first = true })
	if !first {
		return
	}
	close(p.reached)
	select {
	case <-p.released:
	case <-ctx.Done():
	}
}
