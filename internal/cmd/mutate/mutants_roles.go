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
}
