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
}
