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

// AnnotationMirror marks a mirror pod: the hub's copy of a node's static
// pod, which the node creates and the hub keeps apart from other pods. Its
// value is the static pod's config hash, as kubelet sets it.
const AnnotationMirror = "kubernetes.io/config.mirror"
