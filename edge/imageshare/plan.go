package imageshare

import (
	"slices"
	"strings"
)

// Candidate is a site peer as Sources weighs it for one blob.
type Candidate struct {
	Name string
	// Has is whether the peer answered HEAD for the blob with 200: it
	// holds it now.
	Has bool
	// Pulling is whether the peer says (mesh.Meta.Pulling) that it is
	// fetching the blob from outside the site now.
	Pulling bool
}

// Sources returns the peers to fetch a blob from, in order, before its
// registry: those that hold it, then those that are pulling it and will
// serve it once they have it. Once the node itself said it is pulling
// the blob (announced), only peers of a lower name that pull it too are
// waited for: of the nodes that said so at once, the lowest named
// fetches the blob over its uplink and the others from it, and none
// waits for one that waits for it. Peers in bad, and me, are left out.
// No I/O; the caller owns the result.
func Sources(me string, announced bool, peers []Candidate, bad map[string]bool) []string {
	var has, pulling []string
	for _, p := range peers {
		switch {
		case p.Name == me || bad[p.Name]:
		case p.Has:
			has = append(has, p.Name)
		case p.Pulling && (!announced || p.Name < me):
			pulling = append(pulling, p.Name)
		}
	}
	slices.SortFunc(has, strings.Compare)
	slices.SortFunc(pulling, strings.Compare)
	return append(has, pulling...)
}
