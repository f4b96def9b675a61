package wire

// A node's identity, as the hub signs it into the node's certificate and
// both ends check it: common name NodeUserPrefix+<node name>, organization
// NodesGroup (upstream's user and group of kubelets). SiteLabel is the
// label of the site a node joined with, on its Node.
const (
	NodeUserPrefix = "system:node:"
	NodesGroup     = "system:nodes"
	SiteLabel      = "topology.outpost.dev/site"
)
