// Package networking holds the hub's rules for the networking.k8s.io/v1
// resources networkpolicies, ingresses and ingressclasses: their
// defaults, validation, the ingress status subresource and printer
// columns, as upstream Kubernetes defines them. The hub stores and serves
// them; enforcing policies and routing ingress traffic is for the
// controllers that watch them.
package networking
