package objectfence_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/objectfence"
)

// BenchmarkCommit sets the manifest commits beside a plain PutObject of
// the same 100 B, in turn, each to a key of its own: Commit with the
// Store's ETag cache (one conditional PUT), Commit without it (two HEADs
// and the PUT), and CommitOn on the version the writer holds (its last
// commit, Result.Committed: the conditional PUT alone). Medians and their
// ratios to the plain PUT.
func BenchmarkCommit(b *testing.B) {
	ctx := context.Background()
	e := ep("c", 1, "a")
	body := bytes.Repeat([]byte("x"), 100)
	c := server(b).Client()
	cached := newStore(b, nil, nil)
	uncached := newStore(b, nil, func(c *objectfence.Config) { c.CacheSize = -1 })
	on := newStore(b, nil, nil)
	kp, kc, ku, ko := key(b), key(b), key(b), key(b)
	var plain, withCache, noCache, commitOn []time.Duration
	timed := func(into *[]time.Duration, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(start))
	}
	var read *objectfence.Object
	for b.Loop() {
		timed(&plain, func() error {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(kp), Body: bytes.NewReader(body)})
			return err
		})
		timed(&withCache, func() error { _, err := cached.Commit(ctx, kc, body, tok(e)); return err })
		timed(&noCache, func() error { _, err := uncached.Commit(ctx, ku, body, tok(e)); return err })
		timed(&commitOn, func() error {
			r, err := on.CommitOn(ctx, ko, body, tok(e), read)
			read = r.Committed()
			return err
		})
	}
	p := median(plain)
	b.ReportMetric(float64(p.Microseconds()), "plain-µs")
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"commit-cached", withCache}, {"commit-uncached", noCache}, {"commiton", commitOn}} {
		md := median(m.d)
		b.ReportMetric(float64(md.Microseconds()), m.name+"-µs")
		b.ReportMetric(float64(md)/float64(p), m.name+"/plain")
	}
}
