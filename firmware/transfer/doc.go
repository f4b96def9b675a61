// Package transfer moves release manifests and artifacts from the hub to
// a node over the node's sync connection, on artifact streams of their
// own (sync/wire's ArtifactRequest, ArtifactReply and ArtifactChunk): the
// hub's Server, which serves one stream from the releases and the
// content-addressed blobs it holds, and the node's Fetch and Manifest.
//
// Every chunk is checked by the node against the signed manifest's chunk
// digest before it is written; a chunk that does not match is never
// written, and is fetched again. A transfer cut (a stream error, or no
// progress for a while, as on a black-holed link) resumes from the last
// good chunk, after a restart of the agent too: the partial file holds
// only verified chunks, and is checked again when a fetch starts.
//
// A node may also take an artifact from a copy that is not the hub's, a
// site peer's (FetchCopy): the same partial file, the same chunk digests,
// one attempt; a copy that serves a bad chunk is ErrBadCopy, and the
// hub's Fetch resumes after the chunks it verified.
//
// Delta: a node that holds an earlier artifact names it (its sha256); a
// hub that holds it too sends each chunk of the new one as a zstd frame
// made with the whole earlier artifact as a raw dictionary (zstd's
// --patch-from), or raw when that is not smaller. Each chunk's frame
// decodes on its own, so a resumed delta transfer works as a full one.
// The hub makes the patches of a pair once and keeps them, bounded in
// bytes, for the many nodes that ask for the same pair.
//
// The hub trusts nothing here and the node trusts nothing the hub says:
// only the manifest's digests, which the node verified with
// firmware/manifest, decide what is written.
package transfer
