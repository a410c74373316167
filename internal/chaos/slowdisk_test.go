package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// TestSlowDiskFigures measures a cluster whose nodes' and store's disks
// are slow to sync (powerfs with a delay before every fsync and
// fdatasync), beside the same mount without delay: leader changes per
// minute while idle and while busy (none is caused on purpose), crash
// failover (SIGKILL of the leader until another node leads), and the
// latency of a leader's first write after a failover, which raises the
// fence at the store. A measurement, not a test: it runs only with
// TERMFENCE_SLOWDISK=1 (TERMFENCE_SLOWDISK_PHASE sets the idle and busy
// phases' length, 30s by default; TERMFENCE_SLOWDISK_HEARTBEAT the
// nodes' heartbeat, election's default 1s if unset) and prints one line per
// disk.
func TestSlowDiskFigures(t *testing.T) {
	if os.Getenv("TERMFENCE_SLOWDISK") == "" {
		t.Skip("a measurement of several minutes: set TERMFENCE_SLOWDISK=1")
	}
	if err := powerfs.Available(); err != nil {
		t.Skipf("slow-disk figures need powerfs: %v", err)
	}
	phase := 30 * time.Second
	if s := os.Getenv("TERMFENCE_SLOWDISK_PHASE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		phase = d
	}
	disks := []struct {
		name  string
		delay func(*rand.Rand) time.Duration
	}{
		{"normal", nil},
		{"fsync 50ms", func(*rand.Rand) time.Duration { return 50 * time.Millisecond }},
		{"fsync 200ms", func(*rand.Rand) time.Duration { return 200 * time.Millisecond }},
		{"fsync 500ms", func(*rand.Rand) time.Duration { return 500 * time.Millisecond }},
		{"fsync 50ms, 1 in 100 stalls 3s", func(r *rand.Rand) time.Duration {
			if r.Intn(100) == 0 {
				return 3 * time.Second
			}
			return 50 * time.Millisecond
		}},
	}
	heartbeat := time.Second // election's default
	if s := os.Getenv("TERMFENCE_SLOWDISK_HEARTBEAT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		heartbeat = d
	}
	only := os.Getenv("TERMFENCE_SLOWDISK_ONLY") // a disk's name, to measure it alone
	for _, dk := range disks {
		if only != "" && dk.name != only {
			continue
		}
		line := slowDiskRun(t, phase, heartbeat, dk.name, dk.delay)
		fmt.Println(line)
		t.Log(line)
	}
}

func slowDiskRun(t *testing.T, phase, heartbeat time.Duration, name string, delay func(*rand.Rand) time.Duration) string {
	ctx := context.Background()
	cfg := shortConfig(t)
	cfg.PowerLoss, cfg.Dir, cfg.Faults = true, t.TempDir(), 1
	cfg.Heartbeat = heartbeat
	cfg = cfg.withDefaults()
	c, err := newCluster(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if delay != nil {
		var mu sync.Mutex
		rng := rand.New(rand.NewSource(1))
		f := func() time.Duration { mu.Lock(); defer mu.Unlock(); return delay(rng) }
		for _, d := range c.disks {
			d.SetSyncDelay(f)
		}
	}
	if err := c.startStore(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range c.nodes {
		if err := c.startNode(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	// leader polls every node and returns the leader and the highest term
	// seen.
	leader := func() (int, uint64) {
		li, top := -1, uint64(0)
		for i := range c.nodes {
			if s, err := c.status(ctx, i, 300*time.Millisecond); err == nil {
				top = max(top, s.Term)
				if s.State == "Leader" {
					li = i
				}
			}
		}
		return li, top
	}
	waitLeader := func(not int, limit time.Duration) (int, time.Duration) {
		start := time.Now()
		for time.Since(start) < limit {
			if li, _ := leader(); li >= 0 && li != not {
				return li, time.Since(start)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return -1, limit
	}
	if li, _ := waitLeader(-1, 2*time.Minute); li < 0 {
		_, top := leader()
		return fmt.Sprintf("slowdisk: heartbeat %v, %-32s NO LEADER in 2 minutes (term reached %d)", heartbeat, name, top)
	}
	// observe counts term changes for d.
	observe := func(d time.Duration) int {
		_, last := leader()
		changes := 0
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if _, top := leader(); top > last {
				changes += int(top - last)
				last = top
			}
		}
		return changes
	}
	write := func(li int, k int) (time.Duration, bool) {
		start := time.Now()
		st, _, err := c.do(ctx, http.MethodPost, "http://"+c.nodes[li].proc.addr+"/write",
			map[string]string{"resource": cfg.resource(k % cfg.Resources), "value": fmt.Sprint(k)}, 10*time.Second)
		return time.Since(start), err == nil && st == http.StatusOK
	}
	idle := observe(phase)
	// Busy: writers through whoever leads.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w * 1_000_000; !stop.Load(); k++ {
				li, _ := leader()
				if li < 0 {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if _, ok := write(li, k); ok {
					writes.Add(1)
				}
			}
		}()
	}
	busy := observe(phase)
	stop.Store(true)
	wg.Wait()
	// Crash failover, three times; and the new leader's first write.
	var fails, firsts []time.Duration
	for round := 0; round < 3; round++ {
		li, _ := waitLeader(-1, time.Minute)
		if li < 0 {
			t.Fatalf("%s: no leader before failover %d", name, round)
		}
		c.nodes[li].proc.kill()
		nl, took := waitLeader(li, time.Minute)
		fails = append(fails, took)
		if nl >= 0 {
			// Until it succeeds: the first one raises the fence.
			start := time.Now()
			for k := 0; time.Since(start) < time.Minute; k++ {
				if _, ok := write(nl, 9_000_000+round*1000+k); ok {
					break
				}
			}
			firsts = append(firsts, time.Since(start))
		}
		if err := c.startNode(ctx, li); err != nil {
			t.Fatal(err)
		}
	}
	perMin := func(n int) float64 { return float64(n) / phase.Minutes() }
	return fmt.Sprintf("slowdisk: heartbeat %v, %-32s idle %.1f leader changes/min, busy %.1f/min (%d writes in %v), crash failover %v, first write after failover (fence raise) %v",
		heartbeat, name, perMin(idle), perMin(busy), writes.Load(), phase, med(fails), med(firsts))
}

func med(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("median %v of %v", s[len(s)/2].Round(time.Millisecond), roundAll(ds))
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
