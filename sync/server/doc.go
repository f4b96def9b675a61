// Package server is the hub's end of the sync protocol: it accepts the QUIC
// connections of edge nodes, admits joining nodes, streams each node's view
// and applies the status the node sends, as that node, and opens tunnels
// back to a node. It declares what it needs from the hub (Authority, Sink,
// Presence) and imports nothing from hub; the hub's composition root adapts.
package server
