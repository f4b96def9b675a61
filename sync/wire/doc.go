// Package wire is the sync protocol between the hub and its edge agents: the
// capability version, object keys, the messages, and their length-limited,
// optionally compressed framing on QUIC streams. Both ends import it; it
// imports nothing from hub or edge.
//
// # Streams
//
// One QUIC connection per node, ALPN [ALPN]. The edge opens:
//
//   - a join stream on a connection without a client certificate:
//     [JoinRequest] -> [JoinResponse];
//   - the session stream: [Hello] -> [Welcome], then [Batch] frames down,
//     each answered by an [Ack] once the edge has made it durable; when the
//     Welcome asks for it, the edge first sends its [Inventory];
//   - the status stream: [StatusPush] up, each answered by a [StatusAck];
//   - a renew stream: [RenewRequest] -> [RenewResponse];
//   - artifact streams (firmware/transfer): [ArtifactRequest] ->
//     [ArtifactReply], then [ArtifactChunk] frames down.
//
// The hub opens tunnel streams back to the edge: [TunnelOpen] ->
// [TunnelReply], then raw bytes both ways.
//
// The first frame of a stream says what the stream is. A stream that breaks
// the protocol is ended with an [Error] frame (and a QUIC stream error), not
// the connection.
package wire
