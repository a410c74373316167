package storageguard

// clusterOf is the cluster whose tokens resource takes: ClusterFor's
// answer, or Cluster.
func (g *Guard) clusterOf(resource string) string {
	if g.clusterFor != nil {
		if c := g.clusterFor(resource); c != "" {
			return c
		}
	}
	return g.cluster
}

// RoleClusters returns a GuardConfig.ClusterFor for a store whose resources
// are named after the roles of election group cluster: resource r takes
// only the tokens of role r, whose epochs carry the cluster
// "<cluster>.<r>". A resource named otherwise maps through role first if
// role is not nil (role returns the role that owns a resource; "" means the
// guard's Cluster).
func RoleClusters(cluster string, role func(resource string) string) func(resource string) string {
	return func(resource string) string {
		r := resource
		if role != nil {
			r = role(resource)
		}
		if r == "" {
			return ""
		}
		return cluster + "." + r
	}
}
