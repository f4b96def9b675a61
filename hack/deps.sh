#!/usr/bin/env bash
# deps.sh installs what building, running and testing Outpost needs on a
# Debian machine, and only what is missing: running it again changes nothing.
# `make build`, `make run`, `make test` and .ci/run call it.
#
# To add a dependency, add its Debian package to DEB_PACKAGES with the reason.
set -euo pipefail

export PATH="/usr/local/go/bin:${PATH}"

# Debian packages, "package  # why".
DEB_PACKAGES=(
	gcc             # cgo, which `go test -race` needs
	libc6-dev       # C headers and crt files for cgo
	containerd      # the edge agent's container runtime (1.6 on Debian 12), and its runc shim
	runc            # the default OCI runtime
	crun            # the OCI runtime measured beside runc (--oci-runtime crun)
	iproute2        # ip, for tests that look at pod networks in network namespaces
	nftables        # masquerade and hostPort rules of pod networks
	iptables        # the fallback for kernels without nf_tables
	busybox-static  # the small images of tests, benchmarks and the demo
	docker-registry # a registry on loopback for image pull tests
)

log() { printf 'deps: %s\n' "$*" >&2; }

# need_go checks for a Go toolchain new enough for go.mod. Go is not taken
# from Debian (too old); it is expected at /usr/local/go. A Go of 1.21 or
# later fetches the exact toolchain go.mod asks for from the module proxy by
# itself when GOTOOLCHAIN allows it.
need_go() {
	if ! command -v go >/dev/null 2>&1; then
		log "Go is not installed: unpack a Go release of the version in go.mod into /usr/local/go (see https://go.dev/doc/install), then run this again"
		exit 1
	fi
	local root want have
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	want="$(awk '$1 == "go" { print $2; exit }' "${root}/go.mod")"
	have="$(go env GOVERSION)"
	have="${have#go}"
	if [[ "$(printf '%s\n%s\n' "${want}" "${have}" | sort -V | head -n1)" != "${want}" ]]; then
		log "Go ${have} is older than the ${want} that go.mod needs: install Go ${want} into /usr/local/go, or set GOTOOLCHAIN=auto to let go fetch it"
		exit 1
	fi
}

# need_debs installs the missing packages of DEB_PACKAGES.
need_debs() {
	local missing=() pkg
	for pkg in "${DEB_PACKAGES[@]}"; do
		if ! dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("${pkg}")
		fi
	done
	if ((${#missing[@]} == 0)); then
		return
	fi
	local sudo=()
	if ((EUID != 0)); then
		if ! command -v sudo >/dev/null 2>&1; then
			log "missing Debian packages ${missing[*]}, and not root: install them as root"
			exit 1
		fi
		sudo=(sudo)
	fi
	log "installing ${missing[*]}"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
}

if ! command -v dpkg-query >/dev/null 2>&1; then
	log "not a Debian machine: install the equivalents of ${DEB_PACKAGES[*]} and Go yourself"
else
	need_debs
fi
need_go
