// Package imageshare lets the nodes of a site pull an image over their
// uplinks once: each node serves the content of its containerd store to
// its site peers, read-only, over the OCI distribution API with mutual
// TLS (node certificates of the hub CA), and fetches content by digest
// from its peers before the image's registry.
//
// Tags are resolved at the image's own registry only: a peer is never
// trusted to say what a tag means. Content (manifests by digest, configs,
// layers) is then fetched by digest from peers first, the registry last;
// the Fetcher checks each blob's sha256 itself and skips, for BadFor, a
// peer that served bytes of another digest.
//
// A node does not advertise the digests it holds: a list of them does not
// fit the 512 bytes of its mesh.Meta. Instead a node that needs a blob
// asks its alive peers, HEAD /v2/x/blobs/<digest>, which is always
// current and costs one round trip on the LAN per peer and blob. What the
// Meta does carry is what a node is pulling from outside the site now
// (mesh.Meta.Pulling): a node about to fetch a blob from its registry
// says so and waits a short Window; then it asks its peers again, and if
// one holds the blob now, or an alive peer of a lower name said the same,
// it fetches the blob from that peer, which serves it once it has it,
// instead of over its own uplink. Sources is that decision. A node says
// it pulls a blob until its containerd has committed it, not only until
// its last byte came, and its Server has a request for a blob it is
// fetching, from the registry or from a peer, wait for that commit: a
// peer never finds it neither pulling nor holding a blob it has.
//
// The same Server serves a second source of blobs, its Files: the node's
// over-the-air artifacts, complete and verified, by sha256, with Range
// requests so that a peer resumes a cut fetch. FetchBlob runs the same
// protocol for a caller that reads and checks the blob itself (Blob.Open,
// from a byte offset), as the agent's firmware downloads do against the
// signed manifest's chunk digests; LowerPulling tells such a caller,
// whose fetch from outside may outlast a peer's CommitWait, to wait for a
// peer of a lower name that pulls the blob.
//
// Only edge/agent should import this package.
package imageshare
