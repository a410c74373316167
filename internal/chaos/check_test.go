package chaos

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// ms is a readable timestamp for synthetic histories.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func write(client int, value, node string, call, ret int, out Outcome, term uint64) Op {
	return Op{Client: client, Kind: Write, Resource: "register", Value: value, Node: node,
		Call: ms(call), Return: ms(ret), Outcome: out, Term: term, Leader: node}
}

func refused(client int, value, node string, call, ret int, term uint64, highest uint64, highLeader string) Op {
	op := write(client, value, node, call, ret, Refused, term)
	op.HighestTerm, op.HighestLeader = highest, highLeader
	op.Reason = "stale"
	if term == highest {
		op.Reason = "conflict"
	}
	return op
}

func read(client int, value string, term uint64, leader string, call, ret int) Op {
	return Op{Client: client, Kind: Read, Resource: "register", Value: value, Call: ms(call), Return: ms(ret),
		Outcome: ReadValue, Term: term, Leader: leader}
}

func final(value string, term uint64, leader string) map[string]FinalState {
	return map[string]FinalState{"register": {Found: true, Value: value, Term: term, Leader: leader, Highest: term}}
}

func TestCheckFencedHistoryPasses(t *testing.T) {
	h := History{
		Ops: []Op{
			{Client: 3, Kind: Read, Resource: "register", Call: ms(0), Return: ms(1), Outcome: ReadMissing},
			write(0, "a", "n1", 2, 4, Acked, 5),
			read(3, "a", 5, "n1", 5, 6),
			write(1, "b", "n2", 7, 9, Acked, 6),
			refused(0, "c", "n1", 3, 12, 5, 6, "n2"), // paused old leader, refused
			read(3, "b", 6, "n2", 13, 14),
			// concurrent writes under one term: either order
			write(0, "d", "n2", 15, 20, Acked, 6),
			write(1, "e", "n2", 16, 19, Acked, 6),
			read(3, "d", 6, "n2", 21, 22),
		},
		Claims: []Claim{{At: ms(1), Node: "n1", Term: 5, Leader: "n1"}, {At: ms(8), Node: "n2", Term: 6, Leader: "n2"}},
		Final:  final("d", 6, "n2"),
	}
	r := Check(h, 0)
	if !r.OK() || r.Violated() {
		t.Fatalf("fenced history flagged: %+v", r)
	}
	if r.Acked != 4 || r.RefusedStale != 1 || r.Ops != 9 {
		t.Fatalf("counts: %+v", r)
	}
	want := "chaos: seed=7 faults=3 ops=9 acked=4 refused_stale=1 stale_accepted=0 lost=0 linearizable=true"
	if got := r.Line(7, 3); got != want {
		t.Fatalf("line\n got %s\nwant %s", got, want)
	}
}

// The seed's scenario without a fence: the paused leader's write with
// token 33 lands after token 34 was accepted and read back.
func TestCheckStaleWriteAfterNewerReadIsViolation(t *testing.T) {
	h := History{
		Ops: []Op{
			write(0, "a33", "n1", 0, 50, Acked, 33), // in flight across the pause
			write(1, "b34", "n2", 10, 12, Acked, 34),
			read(2, "b34", 34, "n2", 13, 14),
			read(2, "a33", 33, "n1", 51, 52),
		},
		Final: final("a33", 33, "n1"),
	}
	r := Check(h, 0)
	if r.Linearizable != porcupine.Illegal {
		t.Fatalf("linearizable = %v, want Illegal", r.Linearizable)
	}
	if r.StaleAccepted != 1 || !r.Violated() || r.OK() {
		t.Fatalf("stale_accepted = %d, want 1: %+v", r.StaleAccepted, r.Details)
	}
	// The final state is also below the acknowledged 34.
	if r.Lost != 1 {
		t.Fatalf("lost = %d, want 1 (b34): %v", r.Lost, r.Details)
	}
}

func TestCheckAckedAfterHigherTermIsStale(t *testing.T) {
	h := History{Ops: []Op{
		write(1, "b34", "n2", 0, 2, Acked, 34),
		write(0, "a33", "n1", 3, 4, Acked, 33),
	}}
	r := Check(h, 0)
	if r.StaleAccepted != 1 || r.Linearizable != porcupine.Illegal {
		t.Fatalf("got stale=%d lin=%v, want 1 Illegal", r.StaleAccepted, r.Linearizable)
	}
}

// An indeterminate write may take effect late, but only if its epoch is
// still admitted then.
func TestCheckIndeterminateWrites(t *testing.T) {
	claims := []Claim{{Node: "n1", Term: 5, Leader: "n1"}}
	t.Run("applied late", func(t *testing.T) {
		h := History{Ops: []Op{
			write(0, "x", "n1", 0, 0, Indeterminate, 0),
			read(1, "x", 5, "n1", 10, 11),
		}, Claims: claims}
		if r := Check(h, 0); !r.OK() {
			t.Fatalf("flagged: %+v", r)
		}
	})
	t.Run("never applied", func(t *testing.T) {
		h := History{Ops: []Op{
			write(0, "x", "n1", 0, 0, Indeterminate, 0),
			{Client: 1, Kind: Read, Resource: "register", Call: ms(10), Return: ms(11), Outcome: ReadMissing},
		}, Claims: claims}
		if r := Check(h, 0); !r.OK() {
			t.Fatalf("flagged: %+v", r)
		}
	})
	t.Run("applied after a higher term", func(t *testing.T) {
		h := History{Ops: []Op{
			write(0, "x", "n1", 0, 0, Indeterminate, 0),
			write(1, "y", "n2", 2, 3, Acked, 6),
			read(2, "y", 6, "n2", 4, 5),
			read(2, "x", 5, "n1", 6, 7),
		}, Claims: claims}
		r := Check(h, 0)
		if r.Linearizable != porcupine.Illegal || r.StaleAccepted != 1 {
			t.Fatalf("got lin=%v stale=%d, want Illegal 1", r.Linearizable, r.StaleAccepted)
		}
	})
	t.Run("raised the fence unseen", func(t *testing.T) {
		// n1's write with term 7 may have landed; a later 409 names it.
		h := History{Ops: []Op{
			write(0, "x", "n1", 0, 0, Indeterminate, 0),
			refused(1, "y", "n2", 5, 6, 6, 7, "n1"),
		}, Claims: []Claim{{Node: "n1", Term: 7, Leader: "n1"}, {Node: "n2", Term: 6, Leader: "n2"}}}
		if r := Check(h, 0); !r.OK() {
			t.Fatalf("flagged: %+v", r)
		}
	})
}

func TestCheckLostWrites(t *testing.T) {
	t.Run("read goes back", func(t *testing.T) {
		h := History{Ops: []Op{
			write(0, "a", "n1", 0, 1, Acked, 5),
			write(0, "b", "n2", 2, 3, Acked, 6),
			read(1, "a", 5, "n1", 4, 5),
		}}
		r := Check(h, 0)
		if r.Lost != 1 || r.Linearizable != porcupine.Illegal || r.StaleAccepted != 0 {
			t.Fatalf("got lost=%d stale=%d lin=%v: %v", r.Lost, r.StaleAccepted, r.Linearizable, r.Details)
		}
	})
	t.Run("final state below acknowledged", func(t *testing.T) {
		h := History{Ops: []Op{write(0, "a", "n1", 0, 1, Acked, 5)},
			Final: map[string]FinalState{"register": {Found: false}}}
		r := Check(h, 0)
		if r.Lost != 1 || r.OK() {
			t.Fatalf("got lost=%d: %+v", r.Lost, r)
		}
	})
	t.Run("status highest below acknowledged", func(t *testing.T) {
		h := History{Ops: []Op{write(0, "a", "n1", 0, 1, Acked, 5)},
			Final: map[string]FinalState{"register": {Found: true, Value: "a", Term: 5, Highest: 4}}}
		if r := Check(h, 0); r.Lost != 1 {
			t.Fatalf("got lost=%d", r.Lost)
		}
	})
}

func TestCheckWrongRefusalIsNotLinearizable(t *testing.T) {
	// 409 for a term above every accepted one: the store refused a write it
	// should have applied.
	h := History{Ops: []Op{
		write(0, "a", "n1", 0, 1, Acked, 5),
		refused(0, "b", "n2", 2, 3, 6, 5, "n1"),
	}}
	if r := Check(h, 0); r.Linearizable != porcupine.Illegal {
		t.Fatalf("lin = %v, want Illegal", r.Linearizable)
	}
}

func TestCheckLeaderConflicts(t *testing.T) {
	h := History{Claims: []Claim{
		{Node: "n1", Term: 7, Leader: "n1"},
		{Node: "n2", Term: 7, Leader: "n2"},
		{Node: "n3", Term: 8, Leader: "n1"},
	}}
	r := Check(h, 0)
	if len(r.LeaderConflicts) != 2 || r.OK() {
		t.Fatalf("conflicts = %v", r.LeaderConflicts)
	}
	if !strings.Contains(strings.Join(r.LeaderConflicts, "\n"), "term 7 claimed by n1, n2") {
		t.Fatalf("conflicts = %v", r.LeaderConflicts)
	}
}

func TestCheckContractBreak(t *testing.T) {
	op := write(0, "a", "n1", 0, 1, Indeterminate, 0)
	op.Status, op.Contract = 500, "5xx from a reachable store"
	r := Check(History{Ops: []Op{op}}, 0)
	if len(r.ContractBreaks) != 1 || r.OK() {
		t.Fatalf("contract breaks = %v", r.ContractBreaks)
	}
}

func TestReportVisualize(t *testing.T) {
	h := History{Ops: []Op{
		write(1, "b34", "n2", 0, 2, Acked, 34),
		write(0, "a33", "n1", 3, 4, Acked, 33),
	}}
	r := Check(h, 0)
	path := filepath.Join(t.TempDir(), "sub", "history.html")
	if err := r.Visualize(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "a33") {
		t.Fatalf("visualization does not name the operations")
	}
	if err := (Report{}).Visualize(path); err == nil {
		t.Fatal("empty report visualized")
	}
}

// TestCheckSavedHistory re-checks a history.json that a failed run saved:
// TERMFENCE_CHAOS_HISTORY=failures/chaos-.../history.json.
func TestCheckSavedHistory(t *testing.T) {
	path := os.Getenv("TERMFENCE_CHAOS_HISTORY")
	if path == "" {
		t.Skip("TERMFENCE_CHAOS_HISTORY names no saved history")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	timeout := 10 * time.Minute
	if s := os.Getenv("TERMFENCE_CHAOS_CHECK_TIMEOUT"); s != "" {
		if timeout, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	r := Check(h, timeout)
	t.Logf("%s (check took %v)", r.Line(0, 0), time.Since(start))
	for _, s := range r.Details {
		t.Log(s)
	}
	if !r.OK() {
		t.Errorf("not OK: conflicts %v, contract %v", r.LeaderConflicts, r.ContractBreaks)
	}
}

// A write whose node answered 5xx is over at its return; one with no
// answer may still land later.
func TestCheckPendingIndeterminate(t *testing.T) {
	claims := []Claim{{At: ms(0), Last: ms(1), Node: "n1", Term: 5, Leader: "n1"}}
	hist := func(pending bool) History {
		w := write(0, "x", "n1", 0, 1, Indeterminate, 0)
		w.Pending = pending
		return History{Ops: []Op{
			w,
			{Client: 1, Kind: Read, Resource: "register", Call: ms(2), Return: ms(3), Outcome: ReadMissing},
			read(1, "x", 5, "n1", 4, 5),
		}, Claims: claims}
	}
	if r := Check(hist(true), 0); !r.OK() {
		t.Fatalf("pending write landing late flagged: %v", r.Linearizable)
	}
	if r := Check(hist(false), 0); r.Linearizable != porcupine.Illegal {
		t.Fatalf("finished write landing after its return: %v, want Illegal", r.Linearizable)
	}
}

func TestCandidatesWindow(t *testing.T) {
	seen := map[candidate]span{
		{3, "n1"}: {from: ms(0), to: ms(2000)},
		{5, "n1"}: {from: ms(9500), to: ms(9800)},
		{6, "n2"}: {from: ms(9900), to: ms(12000)},
		{8, "n1"}: {from: ms(13000), to: ms(14000)},
		{9, "n1"}: {always: true},
	}
	op := Op{Node: "n1", Call: ms(10000), Return: ms(11000)}
	got := candidatesFor(op, seen, ms(1000))
	want := []candidate{{5, "n1"}, {9, "n1"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("window: got %v, want %v", got, want)
	}
	if got := candidatesFor(op, seen, 0); len(got) != 4 {
		t.Fatalf("unbounded: got %v, want every epoch of n1", got)
	}
}

func TestRecorderMergesClaims(t *testing.T) {
	r := NewRecorder()
	r.Claim(Claim{At: ms(1), Node: "n1", Term: 4, Leader: "n1"})
	r.Claim(Claim{At: ms(5), Node: "n1", Term: 4, Leader: "n1"})
	r.Claim(Claim{At: ms(3), Node: "n1", Term: 4, Leader: "n1"})
	r.Claim(Claim{At: ms(6), Node: "n2", Term: 5, Leader: "n2"})
	h := r.History(nil, 0)
	if len(h.Claims) != 2 || h.Claims[0].At != ms(1) || h.Claims[0].Last != ms(5) {
		t.Fatalf("claims = %+v", h.Claims)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Binary: "b", Dir: "d", FailureDir: "f", Nodes: 3, Heartbeat: 100 * time.Millisecond, Faults: 1}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"no binary":   func(c *Config) { c.Binary = "" },
		"no dir":      func(c *Config) { c.Dir = "" },
		"no failures": func(c *Config) { c.FailureDir = "" },
		"4 nodes":     func(c *Config) { c.Nodes = 4 },
		"tiny HT":     func(c *Config) { c.Heartbeat = time.Millisecond },
		"no faults":   func(c *Config) { c.Faults = 0 },
		"negative":    func(c *Config) { c.Think = -1 },
		"bad backend": func(c *Config) { c.Backend = "mysql" },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Error("Run accepted an empty config")
	}
}

// TestCheckInsaneTerms: a term above SaneTerm anywhere — a follower's
// status, a leader's claim — fails the check, and so does a forged RPC the
// hostile peer saw accepted.
func TestCheckInsaneTerms(t *testing.T) {
	if r := Check(History{Claims: []Claim{{Node: "n1", Term: 7, Leader: "n1"}}, MaxTerm: 9}, 0); !r.OK() || r.MaxTerm != 9 {
		t.Fatalf("sane history: OK=%v MaxTerm=%d", r.OK(), r.MaxTerm)
	}
	if r := Check(History{MaxTerm: 1 << 63}, 0); r.OK() {
		t.Fatal("a follower at term 2^63 passed")
	}
	if r := Check(History{Claims: []Claim{{Node: "n1", Term: SaneTerm + 1, Leader: "n1"}}}, 0); r.OK() || r.MaxTerm != SaneTerm+1 {
		t.Fatalf("a leader above SaneTerm: OK=%v MaxTerm=%d", r.OK(), r.MaxTerm)
	}
	r := Check(History{}, 0)
	r.HostileAccepted = []string{"127.0.0.1:1 TimeoutNow id=mallory: ACCEPTED"}
	if r.OK() {
		t.Fatal("an accepted forged RPC passed")
	}
}

// TestCheckRefusalReason: a refusal must give the reason the rule gives. A
// store with an off-by-one in its stale rule refuses the highest term's own
// leader as "stale", or an older term as a "conflict": both are
// violations, although a reason-blind check would accept the refusal.
func TestCheckRefusalReason(t *testing.T) {
	base := []Op{
		write(0, "a", "n1", 0, 2, Acked, 5),
		write(1, "b", "n2", 3, 5, Acked, 6),
	}
	ok := refused(0, "c", "n1", 6, 8, 5, 6, "n2") // stale: 5 < 6
	conflict := refused(2, "d", "n3", 9, 11, 6, 6, "n2")
	for _, c := range []struct {
		name   string
		op     Op
		passes bool
	}{
		{"stale, older term", ok, true},
		{"conflict, same term other leader", conflict, true},
		{"stale given for an older term called a conflict", func() Op { o := ok; o.Reason = "conflict"; return o }(), false},
		{"same term other leader called stale", func() Op { o := conflict; o.Reason = "stale"; return o }(), false},
		{"the highest epoch itself refused as stale", func() Op {
			o := refused(1, "e", "n2", 9, 11, 6, 6, "n2")
			o.Reason = "stale"
			return o
		}(), false},
	} {
		h := History{Ops: append(append([]Op(nil), base...), c.op), Final: final("b", 6, "n2")}
		r := Check(h, 0)
		// (A conflict also shows as two leaders of one term; the model's
		// verdict is what this test is about.)
		if got := r.Linearizable == porcupine.Ok; got != c.passes {
			t.Errorf("%s: linearizable = %v, want %v", c.name, got, c.passes)
		}
	}
}

// TestCheckAdmitBeforeRecord: a fence admits a write's epoch (durably
// raising it) before the write runs, and holds it until the write
// returned: meanwhile an older epoch is refused naming the new highest
// while reads still return the older record. That is correct; a record
// that lands after a newer epoch was admitted (a fence that let go early)
// is not.
func TestCheckAdmitBeforeRecord(t *testing.T) {
	ok := History{
		Ops: []Op{
			write(0, "a", "n1", 0, 2, Acked, 4),
			write(1, "b", "n2", 3, 20, Acked, 5),    // admitted at once, record written late
			refused(2, "c", "n1", 4, 6, 4, 5, "n2"), // refused under the new highest
			read(3, "a", 4, "n1", 7, 8),             // the record is still a's
			read(3, "b", 5, "n2", 21, 22),
		},
		Final: final("b", 5, "n2"),
	}
	if r := Check(ok, 0); r.Linearizable != porcupine.Ok {
		t.Fatalf("admission before the record: %+v", r.Linearizable)
	}
	late := History{
		Ops: []Op{
			write(0, "a", "n1", 0, 30, Acked, 4), // admitted at 0, record lands at 25
			write(1, "b", "n2", 3, 5, Acked, 5),
			read(3, "b", 5, "n2", 6, 7),
			read(3, "a", 4, "n1", 26, 27), // a deposed leader's record over its successor's
		},
		Final: final("a", 4, "n1"),
	}
	if r := Check(late, 0); r.Linearizable == porcupine.Ok {
		t.Fatal("a record that landed after a newer epoch was admitted passed the check")
	}
}

// TestCheckSharedAdmission: the acknowledged writes of a new epoch share
// one admission. It may raise the fence from the first call of
// any of them, and no earlier; a record still cannot land after a newer
// epoch was admitted.
func TestCheckSharedAdmission(t *testing.T) {
	base := []Op{
		write(0, "a", "n1", 0, 2, Acked, 4),
		write(1, "b", "n2", 5, 10, Acked, 5),
		write(2, "c", "n2", 3, 12, Acked, 5), // listed later, called first
		write(4, "d", "n2", 4, 11, Acked, 5),
	}
	cases := []struct {
		name string
		ops  []Op
		want porcupine.CheckResult
	}{
		{"refused under the new epoch after the first call", []Op{
			refused(3, "e", "n1", 3, 4, 4, 5, "n2"), // only c was called: c raised the fence
			read(5, "a", 4, "n1", 4, 5),
			read(5, "c", 5, "n2", 13, 14),
		}, porcupine.Ok},
		{"refused under the new epoch before any call", []Op{
			refused(3, "e", "n1", 1, 2, 4, 5, "n2"), // returned before c was called
			read(5, "c", 5, "n2", 13, 14),
		}, porcupine.Illegal},
		{"a record after a newer epoch", []Op{
			write(3, "f", "n3", 13, 14, Acked, 6),
			read(5, "f", 6, "n3", 15, 16),
			read(5, "b", 5, "n2", 17, 18),
		}, porcupine.Illegal},
		{"a value read before any record", []Op{
			read(5, "d", 5, "n2", 2, 3),
		}, porcupine.Illegal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := History{Ops: append(append([]Op(nil), base...), c.ops...)}
			if r := Check(h, 0); r.Linearizable != c.want {
				t.Fatalf("linearizable = %v, want %v", r.Linearizable, c.want)
			}
		})
	}
}
