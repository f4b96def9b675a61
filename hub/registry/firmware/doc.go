// Package firmware holds the CustomResourceDefinitions of Outpost's
// firmware API (firmware.outpost.dev/v1 Release and Rollout), whose
// schemas mirror the Go types of firmware/apis/v1. The hub installs them
// at start and serves them like any CRD (schemas, CEL rules, defaults,
// status subresource, printer columns). Only the hub imports it: it
// pulls in k8s.io/apiextensions-apiserver, which the edge agent must not.
package firmware
