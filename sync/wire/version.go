package wire

// ALPN is the TLS application protocol of the sync connection.
const ALPN = "outpost-sync"

// CapabilityVersion is the version of the protocol this build speaks. It is
// bumped on every change of meaning, with a line below. The hub and an edge
// speak the lower of their two versions, since a fleet in the middle of a
// rollout is always mixed; MinCapabilityVersion is the oldest this build
// still speaks.
//
//   - 1 (2026-11-30): join with a bootstrap token and CSR; session with
//     Hello/Welcome, resume by revision or inventory, Batch/Ack; status
//     outbox with StatusPush/StatusAck; certificate renewal; tunnels.
//   - 2 (2026-12-01): Error carries RetryAfter, the least wait before
//     asking again, which the hub sets when it refuses joins for too many
//     failed ones.
//   - 3 (2026-12-01): the view carries the service account tokens of the
//     node's pods, as objects of ResourcePodTokens (see PodTokens), and
//     Hello lists the ones the edge holds (Hello.Tokens), so that the hub
//     mints only those due. A hub speaking 2 sends none; an edge speaking
//     2 is sent none.
//   - 4 (2026-12-06): the edge reports its node's and pods' resource
//     usage (Usage, type 15) on a stream of its own, at most every 15 s,
//     for metrics.k8s.io. An edge sends none to a hub speaking 3.
//   - 5 (2026-12-06): the view carries the keys of the mesh of the node's
//     site, as an object of ResourceMeshKeys (see MeshKeys), and
//     Hello.Tokens lists the ones the edge holds too. A hub speaking 4
//     sends none; an edge speaking 4 is sent none.
//   - 6 (2026-12-07): the edge fetches release manifests and artifacts
//     on artifact streams of their own (ArtifactRequest, type 16, answered
//     by ArtifactReply, 17, and ArtifactChunk frames, 18), chunk by chunk,
//     resumable, raw or as zstd patches on an artifact the edge holds. An
//     edge opens none to a hub speaking 5.
const (
	CapabilityVersion    = 6
	MinCapabilityVersion = 1
)

// TokensVersion is the first capability version whose views carry pod
// tokens, and MeshKeysVersion the first whose views carry the keys of the
// node's site mesh.
const (
	TokensVersion   = 3
	MeshKeysVersion = 5
)

// Negotiate returns the version two peers speak, the lower of the two, and
// whether it is one this build still speaks.
func Negotiate(peer uint32) (uint32, bool) {
	v := min(peer, CapabilityVersion)
	return v, v >= MinCapabilityVersion
}
