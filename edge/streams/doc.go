// Package streams serves the tunnels the hub opens to the node: a pod's
// logs, exec, attach and port-forward, as the tunnel contract of
// sync/wire says. Nothing listens for them on the node: they come only
// on the node's own sync session. It decides what a tunnel may do and
// does the copying; edge/agent adapts the node's pods, log files and
// runtime to the small interfaces it declares.
package streams
