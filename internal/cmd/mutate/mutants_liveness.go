package main

// livenessMutants are planted liveness bugs: each leaves every safety
// check passing while the cluster stops serving, so only a liveness oracle
// (internal/liveness, the fault suite's recovery check) can kill them.
// -set liveness.
var livenessMutants = []mutant{
	{ID: "LV-confirm", File: "election/epoch.go", Packages: []string{"./internal/chaos/"}, Run: "^TestChaos$",
		What:        "a node's epoch worker stops at its first loss of leadership: elected again, it leads without an epoch for good",
		Original:    "\t\tif !e.confirm() {\n\t\t\tretry = time.After(e.retryInterval())\n\t\t}\n",
		Replacement: "\t\tif !e.confirm() {\n\t\t\tretry = time.After(e.retryInterval())\n\t\t}\n\t\tif !e.won.Load() && func() bool { e.stats.mu.Lock(); defer e.stats.mu.Unlock(); return e.stats.withdrawn > 0 }() {\n\t\t\t<-e.stop\n\t\t\treturn\n\t\t}\n"},
}
