// Package agent is the edge agent's composition root: one node's
// checkpoint, identity, pod lifecycle, node status and sync connection,
// started in the order that keeps pods running without the hub. Only cmd,
// bench and tests import it.
package agent
