package main

// Packages and -run patterns of the fences set.
var (
	pkGate      = []string{"./storageguard/internal/gate/"}
	pkGuardCore = []string{"./storageguard/"}
	pkHTTPFence = []string{"./storageguard/httpfence/"}
	runCore     = "TestMemory$|TestCached$"
	runHold     = "TestProxyLateBodyHeld|TestProxyUpgradeHalfClose|TestProxyRestartHolds|TestBackendHarness"
	runPaths    = "TestProxyCanonicalPaths"
)

// fencesMutants are bugs planted in the in-process lock of the Go fences
// (storageguard/internal/gate, Cached) and in the proxy's hold under the
// backend contract (httpfence): -set fences. Not here: serving raisers in
// no particular order (the gate's tickets removed). RaisesInOrder and
// TestLockInOrder check the order, but the runtime wakes the waiters of a
// closed channel in the order they queued often enough that such a mutant
// survives most runs: no test kills it deterministically yet.
var fencesMutants = []mutant{
	{ID: "GT-ctx", File: "storageguard/internal/gate/gate.go", Packages: pkGuardCore, Run: runCore,
		What:        "a shared caller waiting behind a queued raise ignores its context",
		Original:    "\t\terr := g.await(ctx)\n\t\tif !g.excl && g.queued == 0 {",
		Replacement: "\t\terr := g.await(context.Background())\n\t\tif !g.excl && g.queued == 0 {"},
	{ID: "GT-nested", File: "storageguard/internal/gate/gate.go", Packages: pkGuardCore, Run: runCore,
		What:        "a call nested in a write queues behind the raise that waits for that write",
		Original:    "\tif hasHold(ctx) && g.holdOf(ctx) != nil {",
		Replacement: "\tif false && hasHold(ctx) && g.holdOf(ctx) != nil {"},
	{ID: "GT-stepaside", File: "storageguard/internal/gate/gate.go", Packages: pkGate, Run: "",
		What:        "a raiser whose raise another one did waits for that one's write",
		Original:    "\t\tcase g.gen != gen:\n\t\t\tg.dequeue(t)",
		Replacement: "\t\tcase false:\n\t\t\tg.dequeue(t)"},
	{ID: "GT-dequeue", File: "storageguard/internal/gate/gate.go", Packages: pkGate, Run: "",
		What:        "a raiser that gave up leaves the shared callers it held back waiting",
		Original:    "\tg.queued--\n\tg.waiting--\n\tg.signal()\n}",
		Replacement: "\tg.queued--\n\tg.waiting--\n}"},
	{ID: "CA-nestedraise", File: "storageguard/cached.go", Packages: pkGuardCore, Run: runCore,
		What:        "a raise nested in a write on the same resource waits for that write",
		Original:    "\t\tif e.g.Held(ctx) {\n\t\t\treturn nestedRaise(resource, ep)\n\t\t}",
		Replacement: ""},
	{ID: "HF-timeout-release", File: "storageguard/httpfence/proxy.go", Packages: pkHTTPFence, Run: runHold,
		What:        "a request cut off at the timeout is released at once, though a late body reached the backend",
		Original:    "\t\tif ex.mayAct() {\n\t\t\t// The client went away mid-request,",
		Replacement: "\t\tif ex.mayAct() && time.Now().Before(deadline) {\n\t\t\t// The client went away mid-request,"},
	{ID: "HF-no-backend-timeout", File: "storageguard/httpfence/proxy.go", Packages: pkHTTPFence, Run: runHold,
		What:        "the hold after the cut does not wait out the backend's timeout",
		Original:    "\t\t\tp.hold(ctx, r, ex, time.Now().Add(p.backendTimeout))",
		Replacement: "\t\t\tp.hold(ctx, r, ex, time.Now())"},
	{ID: "HF-halfclose", File: "storageguard/httpfence/proxy.go", Packages: pkHTTPFence, Run: runHold,
		What:        "the backend's end of an upgraded connection counts as done while the client's side was open",
		Original:    "\tif err == io.EOF && u.ex.clientEnded.Load() {",
		Replacement: "\tif err == io.EOF {"},
	{ID: "HF-restart", File: "storageguard/httpfence/startup.go", Packages: pkHTTPFence, Run: runHold,
		What:        "a restarted proxy forwards a newer epoch at once",
		Original:    "\tif f == nil || (f.known && (f.highest.IsZero() || f.highest == ep)) {",
		Replacement: "\tif true {"},
	{ID: "HF-paths", File: "storageguard/httpfence/proxy.go", Packages: pkHTTPFence, Run: runPaths,
		What:        "each spelling of a path is fenced as a resource of its own",
		Original:    "\th.canonical = canonicalPath",
		Replacement: ""},
}
