// Package containerd is the edge agent's runtime.Runtime on containerd,
// through its Go client, the way containerd's CRI plugin runs pods but
// without a pause container: a Supervisor runs the agent's own containerd,
// a Runtime creates, starts, stops, lists and removes the containers of
// pods, execs in them and copies their output into CRI-format log files
// (package logs). Only the agent's composition root imports it.
//
// State lives in containerd, in the agent's namespace, so a restarted
// agent adopts what runs: each container carries labels naming its pod,
// container name and attempt, and those recording its start and exit; a
// pod is a lease of that namespace. The containers of a pod share one runc
// shim (or, with ShimPerNode, all pods of the node do), grouped by the
// io.kubernetes.cri.sandbox-id annotation that containerd's runc shim
// reads.
//
// Logs: a container's stdout and stderr are FIFOs under StateDir that the
// Runtime reads into the log file. When the agent is down nothing reads
// them; the shim holds them open, so output is not lost but waits in the
// kernel's pipe buffers (64 KiB per FIFO and 64 KiB more in the shim's
// pipe from the container, per stream), after which the container's
// writes block until an agent reattaches (List does) and drains them;
// those lines get the time they were read.
//
// Stdin: a container started with Stdin (and a log) has a stdin FIFO
// beside them, whose write end the Runtime keeps open between attachers,
// as the CRI plugin's ContainerIO does; the shim holds one too, so the
// process reads EOF only when an attach of a stdinOnce container closes
// it (both ends, recorded in a label), never when an agent goes away. A
// restarted agent opens the FIFO again from the path containerd keeps
// with the task. Without Stdin the process's stdin is /dev/null.
package containerd
