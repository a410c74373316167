package fencemetrics_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencemetrics"
)

// Counting a fence's decisions: one line around the fence, one in the
// Guard's config.
func Example() {
	reg := prometheus.NewRegistry()
	m := fencemetrics.MustNew(reg)
	fence := m.Wrap(storageguard.NewMemory())
	key := []byte("0123456789abcdef0123456789abcdef")
	codec, _ := epoch.NewHMAC(key)
	guard := storageguard.NewGuard(fence, storageguard.GuardConfig{Cluster: "payments", Verifier: codec, OnRefuse: m.Refused})

	ctx := context.Background()
	write := func(term uint64) error {
		tok, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: term, Leader: "a"})
		return guard.Do(ctx, "orders", tok, func(context.Context, epoch.Epoch) error { return nil })
	}
	_ = write(34)
	_ = write(33)                                                                                       // stale
	_ = guard.Do(ctx, "orders", "not a token", func(context.Context, epoch.Epoch) error { return nil }) // malformed

	n, _ := testutil.GatherAndCount(reg, "termfence_fence_raises_total")
	fmt.Println("series of raises_total:", n)
	for _, c := range []struct{ op, result string }{{"do", "admitted"}, {"do", "stale"}, {"guard", "malformed"}} {
		v, _ := gatherValue(reg, c.op, c.result)
		fmt.Printf("decisions{op=%q,result=%q} %v\n", c.op, c.result, v)
	}
	// Output:
	// series of raises_total: 1
	// decisions{op="do",result="admitted"} 1
	// decisions{op="do",result="stale"} 1
	// decisions{op="guard",result="malformed"} 1
}

// gatherValue reads one series of termfence_fence_decisions_total.
func gatherValue(reg prometheus.Gatherer, op, result string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != "termfence_fence_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["op"] == op && labels["result"] == result {
				return m.GetCounter().GetValue(), nil
			}
		}
	}
	return 0, fmt.Errorf("no series")
}
