package redisfence_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/termfence/termfence/storageguard/redisfence"
)

// Fenced writes against plain ones, on one durable redis-server
// (appendonly yes, appendfsync always) over loopback: docs/PERFORMANCE.md.
//
//	go test -run '^$' -bench . -benchtime 3000x ./storageguard/redisfence/

func benchServer(b *testing.B, cache int) (*server, *redisfence.Fence) {
	s := newServer(b)
	s.install(b, redisfence.Config{CacheSize: cache})
	f, err := redisfence.Open(context.Background(), s.admin, redisfence.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return s, f
}

// BenchmarkSET: a plain SET, one round trip.
func BenchmarkSET(b *testing.B) {
	s, _ := benchServer(b, 0)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if err := s.admin.Set(ctx, "{a}:data", i, 0).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFencedSET: the same SET through the library, with the token
// cache (every write after the first skips the HMAC) and without it (an
// HMAC-SHA256 in Lua on every write).
func BenchmarkFencedSET(b *testing.B) {
	for _, c := range []struct {
		name  string
		cache int
	}{{"cached", 0}, {"uncached", -1}} {
		b.Run(c.name, func(b *testing.B) {
			_, f := benchServer(b, c.cache)
			ctx := context.Background()
			tok := sign(b, ep(7, "a"))
			keys := []string{"{a}:data"}
			for i := 0; b.Loop(); i++ {
				if _, err := f.Do(ctx, "{a}:fence", tok, keys, redisfence.Cmd{"SET", "{a}:data", i}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

const pipeDepth = 100

// BenchmarkPipelinedSET: 100 plain SETs per pipeline; ns/op is per SET.
func BenchmarkPipelinedSET(b *testing.B) {
	s, _ := benchServer(b, 0)
	ctx := context.Background()
	b.ResetTimer()
	for done := 0; done < b.N; done += pipeDepth {
		pipe := s.admin.Pipeline()
		for j := 0; j < pipeDepth; j++ {
			pipe.Set(ctx, "{a}:data"+strconv.Itoa(j), j, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPipelinedFencedSET: 100 fenced SETs per pipeline (cached and
// uncached tokens); ns/op is per write.
func BenchmarkPipelinedFencedSET(b *testing.B) {
	for _, c := range []struct {
		name  string
		cache int
	}{{"cached", 0}, {"uncached", -1}} {
		b.Run(c.name, func(b *testing.B) {
			s, f := benchServer(b, c.cache)
			ctx := context.Background()
			tok := sign(b, ep(7, "a"))
			b.ResetTimer()
			for done := 0; done < b.N; done += pipeDepth {
				pipe := s.admin.Pipeline()
				for j := 0; j < pipeDepth; j++ {
					k := "{a}:data" + strconv.Itoa(j)
					if _, err := f.Queue(ctx, pipe, "{a}:fence", tok, []string{k}, redisfence.Cmd{"SET", k, j}); err != nil {
						b.Fatal(err)
					}
				}
				cmds, err := pipe.Exec(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(cmds) != pipeDepth {
					b.Fatalf("%d replies", len(cmds))
				}
			}
		})
	}
}
