// Package helm tests that Helm 4, used as a library (helm.sh/helm/v4), can
// install, upgrade, roll back and uninstall a typical chart against a real
// hub with an edge node on the fake runtime, all in one process. It has no
// code of its own; only `make test-helm` runs it: it is a Go module of
// its own, so that Helm's dependencies stay out of the hub's and the
// edge's modules and out of make test.
package helm
