package main

import "strings"

// roleResourcePrefix names the store resources that belong to a role of the
// election group: "role/<name>" takes only the tokens of role <name>, whose
// epochs carry the cluster "<cluster>.<name>" (election roles); every other
// resource takes the group leader's tokens.
const roleResourcePrefix = "role/"

// roleResource is the store resource of role r.
func roleResource(r string) string { return roleResourcePrefix + r }

// clusterOfResource is the cluster whose tokens resource takes.
func clusterOfResource(cluster, resource string) string {
	if r, ok := strings.CutPrefix(resource, roleResourcePrefix); ok && r != "" {
		return cluster + "." + r
	}
	return cluster
}

// roleResourceCluster is the store Guard's ClusterFor: a role's resource
// refuses every other role's tokens, and the leader's, as foreign.
func roleResourceCluster(cluster string) func(resource string) string {
	return func(resource string) string { return clusterOfResource(cluster, resource) }
}
