package objectfence_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/objectfence"
)

// BenchmarkPut compares, on the same versitygw server, a plain PutObject of
// some bytes with a fenced Put of the same bytes: with the Store's ETag
// cache (a single writer: the conditional PUT alone) and without it (two
// HEADs, then the conditional PUT). Each iteration does one of each, in
// turn, each to a key of its own, so that load on the machine hits all
// three alike; it reports the median latency of each and the ratios of the
// medians. docs/PERFORMANCE.md has the figures.
//
//	go test -run '^$' -bench BenchmarkPut -benchtime 300x ./objectfence/
func BenchmarkPut(b *testing.B) {
	ctx := context.Background()
	e := ep("c", 1, "a")
	for _, size := range []int{100, 1 << 20} {
		name := fmt.Sprintf("%dB", size)
		if size == 1<<20 {
			name = "1MiB"
		}
		b.Run(name, func(b *testing.B) {
			body := bytes.Repeat([]byte("x"), size)
			c := server(b).Client()
			cached := newStore(b, nil, nil)
			uncached := newStore(b, nil, func(c *objectfence.Config) { c.CacheSize = -1 })
			kp, kc, ku := key(b), key(b), key(b)
			var plain, withCache, noCache []time.Duration
			timed := func(into *[]time.Duration, f func() error) {
				start := time.Now()
				if err := f(); err != nil {
					b.Fatal(err)
				}
				*into = append(*into, time.Since(start))
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				timed(&plain, func() error {
					_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(kp), Body: bytes.NewReader(body)})
					return err
				})
				timed(&withCache, func() error { _, err := cached.Put(ctx, kc, body, tok(e)); return err })
				timed(&noCache, func() error { _, err := uncached.Put(ctx, ku, body, tok(e)); return err })
			}
			p, wc, nc := median(plain), median(withCache), median(noCache)
			b.ReportMetric(float64(p.Microseconds()), "plain-µs")
			b.ReportMetric(float64(wc.Microseconds()), "cached-µs")
			b.ReportMetric(float64(nc.Microseconds()), "uncached-µs")
			b.ReportMetric(float64(wc)/float64(p), "cached/plain")
			b.ReportMetric(float64(nc)/float64(p), "uncached/plain")
		})
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
