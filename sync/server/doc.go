// Package server is the hub's end of the sync protocol: it accepts the QUIC
// connections of edge nodes, admits joining nodes, streams each node's view
// and applies the status the node sends, as that node, and opens tunnels
// back to a node; it mints the service account tokens of the pods of each
// node's view. It declares what it needs from the hub (Authority, Sink,
// Presence, Objects, TokenMinter) and imports nothing from hub; the hub's
// composition root adapts.
package server
