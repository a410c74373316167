package main

// runRolesLive: the roles tests, the liveness tests and the raft facts
// the roles protocol rests on.
var runRolesLive = "TestRole|TestRaftVerifyLeader"

// rolesMutants are bugs planted in the roles code's liveness, admin paths
// and proof of leadership (docs/DESIGN.md, "Roles"): -set roles.
var rolesMutants = []mutant{
	{ID: "RV-once", File: "election/roles.go", Packages: pkElection, Run: runRolesLive,
		What:        "LeadRole runs its function at most once per grant: a lease regained on the same grant runs nothing",
		Original:    "err == nil && (ep != last || gen != lastGen) {",
		Replacement: "err == nil && ep.Term > last.Term && gen+lastGen >= 0 {"},
	{ID: "RV-lapse", File: "election/roleslease.go", Packages: pkElection, Run: runRolesLive,
		What:        "a lapsed lease wakes nobody until the renewal loop looks again (after its RPC)",
		Original:    "\t\tif h != held {\n\t\t\theld = h\n\t\t\trs.t.broadcast()\n\t\t}",
		Replacement: "\t\tif h != held {\n\t\t\theld = h\n\t\t}"},
	{ID: "RV-ctx", File: "election/roleslease.go", Packages: pkElection, Run: runRolesLive,
		What:        "an admin call with an ended context blocks the old owners and leaves them blocked",
		Original:    "\trs.mu.Lock()\n\tif err := ctx.Err(); err != nil {",
		Replacement: "\trs.mu.Lock()\n\tfor _, id := range from {\n\t\trs.blockLocked(id)\n\t}\n\tif err := ctx.Err(); err != nil {"},
	{ID: "RV-undo", File: "election/roles.go", Packages: pkElection, Run: runRolesLive,
		What:        "a failed MoveRole leaves its handover target behind",
		Original:    "\t\tif e.roles.ls.prefer != nil && e.roles.ls.prefer[r] == to {",
		Replacement: "\t\tif false {"},
	{ID: "RV-verify", File: "election/roleslease.go", Packages: pkElection, Run: "TestRolesDeposedLeaderNotRenewed|TestRolesAssignedBalanced",
		What:        "the renewal path's proof of leadership is raft's VerifyLeader, which late answers to old heartbeats satisfy",
		Original:    "\t\tif !rs.proveLeader(term) {",
		Replacement: "\t\tvf := e.raft.VerifyLeader()\n\t\tif h := rs.proofHook.Load(); h != nil {\n\t\t\t(*h)()\n\t\t}\n\t\tif e.wait(context.Background(), vf) != nil {"},
	{ID: "RV-probe", File: "election/roleslease.go", Packages: pkElection, Run: "TestRolesDeposedLeaderNotRenewed|TestRolesAssignedBalanced",
		What:        "a probe is granted whatever the receiver's term",
		Original:    "\tok := cur == term && cur != 0\n",
		Replacement: "\tok := cur != 0\n"},
	{ID: "RV-atomic", File: "election/roles.go", Packages: pkElection, Run: "TestRolesEpochOneDecision",
		What:        "RoleEpoch decides on a grant read before the lease, whatever was applied in between",
		Original:    "\tif rs.t.version() == v {",
		Replacement: "\tif true {"},
}
