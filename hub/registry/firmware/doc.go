// Package firmware holds the CustomResourceDefinitions of Outpost's
// firmware API (firmware.outpost.dev/v1 Release and Rollout), whose
// schemas mirror the Go types of firmware/apis/v1 field for field. They
// are embedded YAML (releases.yaml, rollouts.yaml), decoded by CRDs.
//
// The hub installs them at start with Install, a server-side apply
// through its own API that creates them or updates what an older hub
// installed, and then serves them as it serves every CRD: schemas, CEL
// rules, defaults, status subresource, printer columns, short names (rel,
// ro) and the firmware category.
//
// Only the hub imports this package: it pulls in
// k8s.io/apiextensions-apiserver, which the edge agent must not.
package firmware
