// Package client is the edge's end of the sync protocol: it joins a hub,
// keeps one QUIC connection to it with back-off, resumes the node's view
// into the edge's checkpoint, drains the status outbox, renews the node
// certificate, and serves the tunnels the hub opens. It declares what it
// needs from the edge (Store, Outbox) and imports nothing from edge or hub.
package client
