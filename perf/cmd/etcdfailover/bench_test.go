package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/perf/results"

	"github.com/termfence/termfence/perf/internal/etcdserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startTestServer(t *testing.T, sc etcdserver.Config) *etcdserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := etcdserver.Start(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// TestGrantedTTL pins the server-side minimum lease TTL the report relies on:
// ceil(1.5 × election-timeout) in whole seconds.
func TestGrantedTTL(t *testing.T) {
	cases := []struct {
		tick, election uint
		want           time.Duration
	}{
		{100, 1000, 2 * time.Second}, // etcd's defaults: WithTTL(1) becomes 2 s
		{100, 500, time.Second},
	}
	for _, c := range cases {
		srv := startTestServer(t, etcdserver.Config{TickMs: c.tick, ElectionMs: c.election})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := bench(ctx, benchConfig{
			Endpoint: srv.Endpoint, Scenario: scenarioHandover, Rounds: 1, Clients: 2,
			TTL: 1, RoundLimit: 30 * time.Second, Seed: 1,
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if res.GrantedTTL != c.want {
			t.Errorf("election-timeout %dms: granted TTL %v, want %v", c.election, res.GrantedTTL, c.want)
		}
	}
}

// TestCrashWaitsForLeaseExpiry checks that a crash round measures lease expiry:
// the dead leader's lease is neither revoked nor its key deleted, so the next
// leader cannot take over before the lease runs out. With a granted TTL of 1 s
// and renewals at most every 500 ms (the client's send loop), at least ~500 ms
// of lease remain at the crash; a crash that revoked the lease would fail over
// in a few milliseconds, like a handover. The bound checks what is measured,
// not how fast etcd is.
func TestCrashWaitsForLeaseExpiry(t *testing.T) {
	srv := startTestServer(t, etcdserver.Config{TickMs: 100, ElectionMs: 500})
	for _, sc := range []string{scenarioCrash, scenarioHandover} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err := bench(ctx, benchConfig{
			Endpoint: srv.Endpoint, Scenario: sc, Rounds: 3, Clients: 3,
			TTL: 1, RoundLimit: 30 * time.Second, Seed: 7,
		})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		if len(res.Samples) != 3 || len(res.Leaders) != 3 || len(res.Retired) != 3 {
			t.Fatalf("%s: %d samples, %d leaders, %d retired; want 3 each", sc, len(res.Samples), len(res.Leaders), len(res.Retired))
		}
		for i := range res.Samples {
			if res.Leaders[i] == res.Retired[i] {
				t.Errorf("%s round %d: %s retired and still led", sc, i+1, res.Leaders[i])
			}
			if i > 0 && res.Retired[i] != res.Leaders[i-1] {
				t.Errorf("%s round %d: retired %s, but %s was leading", sc, i+1, res.Retired[i], res.Leaders[i-1])
			}
		}
		if sc == scenarioCrash {
			for i, d := range res.Samples {
				if d < 400*time.Millisecond {
					t.Errorf("crash round %d failed over in %v: the lease cannot have expired", i+1, d)
				}
			}
		}
	}
}

// TestRunWritesResults runs the command end to end and reads its file back.
func TestRunWritesResults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcd.json")
	var out strings.Builder
	err := run(context.Background(), []string{"-n", "2", "-clients", "2", "-scenario", "handover",
		"-election-timeout", "500", "-json", path, "-seed", "3"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f, err := results.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Results) != 1 {
		t.Fatalf("%d results, want 1", len(f.Results))
	}
	r := f.Results[0]
	if r.System != results.SystemEtcd || r.Scenario != results.ScenarioHandover || len(r.SamplesMS) != 2 ||
		r.LeaseTTLMS != 1000 || r.Nodes != 2 {
		t.Fatalf("unexpected result %+v", r)
	}
	if !strings.Contains(out.String(), "handover requested TTL 1s, granted 1s: n=2") {
		t.Fatalf("summary line missing from output:\n%s", out.String())
	}
}

func TestParseRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"-n", "0"}, {"-clients", "1"}, {"-ttl", "0"}, {"-scenario", "crash,reboot"},
		{"-round-limit", "0s"}, {"extra"},
	} {
		if _, err := parse(args, io.Discard); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
	o, err := parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.rounds != 20 || o.clients != 3 || o.ttl != 1 || len(o.scenarios) != 2 {
		t.Fatalf("defaults: %+v", o)
	}
}
