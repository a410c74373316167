package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/redisserver"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
	"github.com/termfence/termfence/storageguard/redisfence"
)

// raiser raises one resource from several goroutines, each with the next
// term, and remembers the highest acknowledged raise.
type raiser struct {
	term, acked atomic.Uint64
	acks        atomic.Int64
	wg          sync.WaitGroup
	stop        chan struct{}
}

const crashResource = "{crash}:fence"

// start raises through f from n goroutines, each also writing its term to
// a data key in the same call, until stopped.
func (r *raiser) start(t *testing.T, f *redisfence.Fence, n int) {
	r.stop = make(chan struct{})
	for i := 0; i < n; i++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				select {
				case <-r.stop:
					return
				default:
				}
				term := r.term.Add(1)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := f.Do(ctx, crashResource, sign(t, ep(term, "n")), []string{"{crash}:data"}, redisfence.Cmd{"SET", "{crash}:data", term})
				cancel()
				switch {
				case err == nil:
					for {
						a := r.acked.Load()
						if a >= term || r.acked.CompareAndSwap(a, term) {
							break
						}
					}
					r.acks.Add(1)
				case errors.Is(err, storageguard.ErrStale):
				default:
					// The server is down: wait for the stop.
					select {
					case <-r.stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
		}()
	}
}

func (r *raiser) halt() {
	close(r.stop)
	r.wg.Wait()
}

// waitAcks waits until n more raises were acknowledged.
func (r *raiser) waitAcks(t *testing.T, n int64) {
	t.Helper()
	want := r.acks.Load() + n
	deadline := time.Now().Add(2 * time.Minute)
	for r.acks.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d acknowledged raises in 2 minutes", r.acks.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// crashRounds raises, cuts the server with cut in mid-stream, restarts it
// and checks that the fence key and the data are at least the highest
// acknowledged raise, rounds times. It returns the first loss (or fails
// t with it when fatal), or "".
func crashRounds(t *testing.T, s *server, rounds int, fatal bool, cut func() error) string {
	ctx := context.Background()
	// A fresh client per round and for each check: go-redis's pool keeps
	// failing for a while after its dials failed (the server was down).
	open := func() *redisfence.Fence {
		// Installed again each round: a lossy cut (the control) can take
		// the library with it.
		c := client(t, s.Addr, "", "")
		if err := redisfence.Install(ctx, c, redisfence.Config{Cluster: "payments", HMACKey: testKey}); err != nil {
			t.Fatal(err)
		}
		f, err := redisfence.Open(ctx, client(t, s.Addr, "", ""), redisfence.Options{Admin: s.durable})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	var r raiser
	for round := 0; round < rounds; round++ {
		r.start(t, open(), 4)
		r.waitAcks(t, 20)
		if err := cut(); err != nil {
			t.Fatal(err)
		}
		r.halt()
		<-s.Done()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := s.Restart(rctx)
		cancel()
		if err != nil && strings.Contains(s.Log(), "Bad file format reading the append only file") {
			// A cut tore the append-only file's last, unacknowledged
			// command (appendfsync always syncs before each answer, so
			// nothing acknowledged is in a torn tail). Redis then refuses
			// to start until the tail is cut off, as an operator does with
			// redis-check-aof --fix (see the package doc); the check below
			// then shows whether anything acknowledged went with it.
			t.Logf("round %d: the cut tore the append-only file's tail; redis-check-aof --fix: %s", round, fixAOF(t, s.Dir))
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err = s.Restart(rctx)
			cancel()
		}
		if err != nil {
			t.Fatal(err)
		}
		if s.onStart != nil {
			s.onStart()
		}
		// Read around the library, which a lossy cut may have lost.
		check := client(t, s.Addr, "", "")
		var h epoch.Epoch
		if v, err := check.Get(ctx, crashResource).Result(); err == nil {
			h, err = epoch.Parse(v)
			if err != nil {
				t.Fatalf("after restart, the fence key holds %q: %v", v, err)
			}
		} else if !errors.Is(err, redis.Nil) {
			t.Fatalf("after restart: %v\n%s", err, s.Log())
		}
		d, _ := check.Get(ctx, "{crash}:data").Uint64()
		acked := r.acked.Load()
		t.Logf("round %d: %d acks, highest acknowledged %d, after restart fence %d, data %d", round, r.acks.Load(), acked, h.Term, d)
		if h.Term < acked || d < acked {
			loss := fmt.Sprintf("round %d: acknowledged raise to %d lost: after restart the fence is at %d, the data at %d", round, acked, h.Term, d)
			if fatal {
				t.Fatalf("%s\n%s", loss, s.Log())
			}
			return loss
		}
		// The next round's terms start above whatever survived.
		if h.Term > r.term.Load() {
			r.term.Store(h.Term)
		}
	}
	return ""
}

// TestSIGKILLLosesNoAcknowledgedRaise: redis-server killed with SIGKILL
// while four writers raise the fence: after a restart, the fence key and
// the data written with it are at least the highest acknowledged raise
// (appendfsync always: Redis syncs the AOF before it replies).
func TestSIGKILLLosesNoAcknowledgedRaise(t *testing.T) {
	s := newServer(t)
	crashRounds(t, s, 3, true, s.Kill)
}

// TestPowerCutLosesNoAcknowledgedRaise: redis-server's directory on
// powerfs, power cut (torn and not) while four writers raise the fence:
// after a restart, nothing acknowledged is lost.
func TestPowerCutLosesNoAcknowledgedRaise(t *testing.T) {
	disk := powerfs.MountTest(t, powerfs.Options{})
	s := powerServer(t, disk)
	torn := false
	crashRounds(t, s, 4, true, func() error {
		torn = !torn
		return disk.PowerCut(torn)
	})
}

// TestPowerCutControl: the same with appendfsync no, which the fence's
// Open refuses: the power cut must lose an acknowledged raise, or the test
// above could not fail.
func TestPowerCutControl(t *testing.T) {
	disk := powerfs.MountTest(t, powerfs.Options{})
	s := powerServer(t, disk, "--appendfsync", "no")
	// Open checks durability through a client that reports it durable.
	loss := crashRounds(t, s, 4, false, func() error { return disk.PowerCut(false) })
	if loss == "" {
		t.Fatal("appendfsync no lost no acknowledged raise to four power cuts: the test cannot tell")
	}
	t.Logf("caught, as it must be: %s", loss)
}

// powerServer starts redis-server in a directory on disk, tracked by the
// disk so that a power cut ends it, also after each restart.
func powerServer(t *testing.T, disk *powerfs.Disk, args ...string) *server {
	t.Helper()
	// Redis 7.0 creates its appendonlydir without syncing the directory
	// above it: a power cut soon after the first start loses the whole
	// append-only file, acknowledged writes and the library with it. The
	// deployment recipe (doc.go) creates it beforehand, synced.
	if err := redisserver.PrepareDir(disk.Dir()); err != nil {
		t.Fatal(err)
	}
	rs := redisserver.ForTestIn(t, disk.Dir(), args...)
	s := &server{Server: rs, admin: client(t, rs.Addr, "", "")}
	s.onStart = func() { disk.Track(rs.Pid()) }
	s.onStart()
	if len(args) > 0 {
		s.durable = fakeDurable(t)
	}
	return s
}

// fixAOF runs redis-check-aof --fix on the append-only files of the server
// in dir, answering its question, and returns what it printed.
func fixAOF(t *testing.T, dir string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-check-aof")
	if err != nil {
		t.Fatalf("the append-only file is torn and redis-check-aof is missing: %v", err)
	}
	cmd := exec.Command(bin, "--fix", filepath.Join(dir, redisserver.AOFDir, "appendonly.aof.manifest"))
	cmd.Stdin = strings.NewReader("y\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-check-aof --fix: %v\n%s", err, out)
	}
	return strings.Join(strings.Fields(string(out)), " ")
}
