// Package manifest is the trust root of Outpost's over-the-air releases: the
// release manifest, its signing with ed25519 keys, and its verification by
// each node, plus the chunk digests that pin every byte of every artifact.
// It is a leaf package (standard library only) that both the hub and the
// edge agent import.
//
// # Format
//
// A release is described by a Manifest (name, semantic version, expiry, an
// optional AllowDowngradeFrom, and 1..64 Components). Each Component gives
// an artifact's kind ("agent" or "file"), target platform, size, whole-file
// sha256, chunk size and the sha256 of each chunk. A manifest may also list
// up to 16 HealthChecks: exec or HTTP checks of a named pod that each
// node runs during its trial of the release and that must pass before it
// commits (the field is left out when empty, so manifests without checks
// are the bytes they always were). The manifest's JSON is
// carried byte for byte as the payload of an Envelope:
//
//	{
//	  "payloadType": "application/vnd.outpost.firmware.manifest.v1+json",
//	  "payload": "<base64 of the manifest's JSON>",
//	  "signatures": [{"keyid": "<16 hex>", "sig": "<base64 ed25519 signature>"}]
//	}
//
// Each signature is over "outpost firmware manifest v1\n" followed by the
// payload bytes. The prefix separates this use of a key from any other; the
// payload is never re-encoded between signer and node, so what was signed
// is exactly what is checked. A keyid is the hex of the first 8 bytes of
// the sha256 of the public key: a hint naming which trusted key to try.
//
// # Trust model
//
// Release keys are kept off the hub, by whoever cuts releases (`outpost
// release keygen`, `outpost release create`). The hub stores releases and
// artifacts and drives rollouts, and it holds only public keys, which it
// hands to nodes at join and in the sync view. A node keeps them, and
// before a byte of an artifact is installed or executed it checks, itself
// (Verify, in this order; the first failure is the refusal's Reason):
//
//  1. size: the envelope is at most MaxEnvelopeBytes (TooLarge);
//  2. decoding: the envelope is strict JSON (Malformed);
//  3. signatures, before the payload is interpreted at all: every
//     signature by a trusted key verifies (else BadSignature, even if
//     enough others do: a tampered envelope is not trusted), at least one
//     signature is by a trusted key (else UnknownKey), and at least
//     Threshold distinct trusted keys signed (else NotEnoughSignatures);
//  4. content: the manifest decodes strictly and is valid (Malformed,
//     TooLarge, Invalid);
//  5. expiry, against the node's clock (Expired);
//  6. platform: some component is for the node's OS/arch (WrongPlatform);
//  7. downgrade: the version is not below the node's highest committed one
//     unless a signed AllowDowngradeFrom covers that one (Downgrade).
//
// Then, while downloading, each chunk against its signed digest (Verifier,
// VerifyChunk: DigestMismatch), and the assembled file against the size,
// every chunk and the whole-file digest (VerifyFile).
//
// The hub is not trusted with any of this because it is the part most
// exposed (an API reachable by the fleet and by operators) and because one
// compromised hub must not be able to push code to thousands of gateways:
// whoever controls the hub can withhold, delay or replay a release until it
// expires, but cannot make a node run bytes that the release keys did not
// sign, nor roll a node back below what it has committed.
//
// # Strict decoding
//
// Decoders are bounded before they allocate in proportion to their input:
// the envelope is at most MaxEnvelopeBytes, and a token walk checks every
// list against its limit (MaxSignatures, MaxComponents, MaxChunks,
// MaxHealthChecks, MaxExecArgs) and every object key against the exact
// field names before encoding/json decodes anything. Unknown, duplicate or
// differently-cased keys, null lists and trailing data are refused, so a
// signer's tools and a node cannot read the same bytes differently. All
// refusals are *Error values with a Reason meant for node and rollout
// status.
package manifest
