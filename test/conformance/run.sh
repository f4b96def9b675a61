#!/usr/bin/env bash
# run.sh runs upstream's sig-api-machinery [Conformance] specs (the e2e
# suite of k8s.io/kubernetes, built from this directory's go.mod) against
# `outpost up`, and writes the results to $CONFORMANCE_OUT
# (bench-results/conformance/): report.json and junit.xml (Ginkgo's),
# summary.md (counts, failures grouped by reason, every spec), the suite's
# log (e2e.log) and the hub's and nodes' (outpost-up.log).
#
# It must run as root: the hub, its nodes (with real containers on their
# own containerd) and the suite run in a network, PID and mount namespace
# of their own (unshare), with nothing but a loopback, so that no packet
# leaves the machine (image pulls fail at once: specs that need an image
# from a registry fail, and the summary says which image) and so that
# every process and mount of the run ends with it. The nodes' cgroups,
# which no namespace holds, are removed afterwards.
#
# Environment:
#   CONFORMANCE_OUT      where results go (bench-results/conformance)
#   CONFORMANCE_TIMEOUT  bound of the whole run in its namespaces (45m)
#   CONFORMANCE_PROCS    Ginkgo processes running specs at once (6); the
#                        specs that wait out a missing image spend minutes
#                        idle, so several run side by side
#   CONFORMANCE_FOCUS    Ginkgo focus ('\[sig-api-machinery\].*\[Conformance\]')
#   CONFORMANCE_SKIP     Ginkgo skip ('' : none)
#   CONFORMANCE_NODES    edge nodes of `outpost up` (2)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${CONFORMANCE_OUT:-$root/bench-results/conformance}
run_timeout=${CONFORMANCE_TIMEOUT:-45m}
procs=${CONFORMANCE_PROCS:-6}
focus=${CONFORMANCE_FOCUS:-'\[sig-api-machinery\].*\[Conformance\]'}
skip=${CONFORMANCE_SKIP:-}
nodes=${CONFORMANCE_NODES:-2}
bin=$root/bin
export PATH=/usr/local/go/bin:$PATH

log() { printf 'conformance: %s\n' "$*" >&2; }

# inside runs in the new namespaces, as their PID 1: it starts the hub and
# nodes, waits for them, runs the suite and stops the hub. Whatever it
# leaves is killed by the kernel when it exits.
inside() {
	local tmp=$1 up_pid rc=0
	ip link set lo up
	mkdir -p "$tmp/state"
	"$bin/outpost" up --dir "$tmp/state" --nodes "$nodes" >"$tmp/up.out" 2>"$out/outpost-up.log" &
	up_pid=$!
	# Stop the hub on the way out, as Ctrl-C does, before the kernel
	# kills the rest (the containers, which outlive `outpost up`).
	trap 'stop_up '"$up_pid" EXIT
	trap 'exit 143' TERM INT
	wait_ready "$tmp" "$up_pid"
	local kubeconfig=$tmp/state/hub/admin.kubeconfig
	log "outpost is up ($(kubectl --kubeconfig "$kubeconfig" get nodes --no-headers | wc -l) nodes); running the suite"
	local suite_timeout
	suite_timeout=$(suite_timeout "$run_timeout")
	local args=(--procs="$procs" --timeout="$suite_timeout" --no-color -v
		--output-dir="$out" --json-report=report.json --junit-report=junit.xml
		--focus="$focus")
	[[ -n $skip ]] && args+=(--skip="$skip")
	"$bin/ginkgo" run "${args[@]}" "$bin/conformance.test" -- \
		--kubeconfig="$kubeconfig" --provider=skeleton \
		--e2e-output-dir="$tmp/e2e-output" >"$out/e2e.log" 2>&1 || rc=$?
	log "the suite exited with $rc"
	return 0
}

# wait_ready waits up to 5 minutes for `outpost up` to print its export
# line (the hub serves and every node is connected) and for the API to
# answer /readyz.
wait_ready() {
	local tmp=$1 pid=$2 deadline=$((SECONDS + 300))
	until grep -q '^export KUBECONFIG=' "$tmp/up.out" 2>/dev/null &&
		kubectl --kubeconfig "$tmp/state/hub/admin.kubeconfig" get --raw /readyz >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "outpost up exited before it was ready; see $out/outpost-up.log"
			exit 1
		fi
		if ((SECONDS > deadline)); then
			log "outpost up not ready within 5 minutes; see $out/outpost-up.log"
			exit 1
		fi
		sleep 1
	done
}

# stop_up interrupts `outpost up` and waits up to a minute for it to stop.
stop_up() {
	local pid=$1 i
	kill -INT "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 60; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# suite_timeout leaves 5 minutes of the run's bound (such as 45m) for
# starting and stopping the hub and nodes.
suite_timeout() {
	local m=${1%m}
	[[ $m =~ ^[0-9]+$ ]] || { echo 40m; return; }
	echo "$((m > 10 ? m - 5 : m))m"
}

# node_cgroups lists the cgroups of `outpost up`'s nodes (named
# /outpost-edge-N at the top of each hierarchy), the deepest first.
node_cgroups() {
	local top
	for top in /sys/fs/cgroup/outpost-edge-* /sys/fs/cgroup/*/outpost-edge-*; do
		[[ -d $top ]] && find "$top" -depth -type d
	done
	return 0
}

# cleanup removes what the run left outside its namespaces: the nodes'
# cgroups that did not exist before it (their processes are gone with the
# PID namespace; the kernel may take a moment to empty them) and its
# temporary directory, and then checks that no process, mount or cgroup
# of the run is left.
cleanup() {
	local tmp=$1 before=$2 d left i
	for ((i = 0; i < 50; i++)); do
		left=0
		while read -r d; do
			grep -qxF "$d" "$before" && continue
			rmdir "$d" 2>/dev/null || left=1
		done < <(node_cgroups)
		((left == 0)) && break
		sleep 0.2
	done
	if grep -qF " $tmp/" /proc/self/mountinfo; then
		log "mounts left under $tmp:"; grep -F " $tmp/" /proc/self/mountinfo >&2
		return 1
	fi
	if pgrep -f -- "$tmp" >/dev/null; then
		log "processes left:"; pgrep -af -- "$tmp" >&2
		return 1
	fi
	left=$(node_cgroups | grep -vxFf "$before" || true)
	if [[ -n $left ]]; then
		log "cgroups left:"; echo "$left" >&2
		return 1
	fi
	rm -rf "$tmp" "$before"
	log "cleaned up: no process, mount or cgroup of the run is left"
}

if [[ ${1:-} == --inside ]]; then
	inside "$2"
	exit
fi

if ((EUID != 0)); then
	log "run as root: the run needs network, PID and mount namespaces and real containers"
	exit 1
fi

start=$SECONDS
log "building bin/outpost"
make -C "$root" build >&2
log "building the e2e suite (k8s.io/kubernetes at the release of go.mod) and Ginkgo"
(cd "$here" && go test -c -vet=off -o "$bin/conformance.test" . &&
	go build -o "$bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo &&
	go build -o "$bin/conformance-summary" ./summary)
log "built in $((SECONDS - start))s"

rm -rf "$out"
mkdir -p "$out"
tmp=$(mktemp -d /tmp/outpost-conformance.XXXXXX)
before=$(mktemp /tmp/outpost-conformance-cgroups.XXXXXX)
node_cgroups >"$before"
export CONFORMANCE_OUT=$out CONFORMANCE_PROCS=$procs CONFORMANCE_FOCUS=$focus \
	CONFORMANCE_SKIP=$skip CONFORMANCE_NODES=$nodes CONFORMANCE_TIMEOUT=$run_timeout
run_start=$SECONDS
rc=0
# --kill-child: if unshare is killed, its child (PID 1 of the namespace)
# gets SIGTERM and stops the hub; the PID namespace takes the rest.
timeout --kill-after=2m "$run_timeout" \
	unshare --net --pid --mount --fork --mount-proc --propagation private --kill-child=SIGTERM \
	bash "$here/run.sh" --inside "$tmp" || rc=$?
log "run took $((SECONDS - run_start))s (exit $rc)"
cleanup "$tmp" "$before"

if [[ ! -s $out/report.json ]]; then
	log "no report: see $out/e2e.log and $out/outpost-up.log"
	exit 1
fi
"$bin/conformance-summary" -in "$out/report.json" -out "$out/summary.md"
log "summary in $out/summary.md, total $((SECONDS - start))s"
