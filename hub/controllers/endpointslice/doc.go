// Package endpointslice is the hub's EndpointSlice controller: for every
// Service with a selector it keeps EndpointSlices (discovery.k8s.io/v1)
// listing the ready, not ready and terminating pods the selector matches,
// as upstream's endpointslice-controller.k8s.io does. Services without a
// selector are the user's: their slices are left alone. It also keeps the
// `kubernetes` Service's endpoints (ReconcileAPIEndpoints).
//
// The slices follow upstream: labels kubernetes.io/service-name and
// endpointslice.kubernetes.io/managed-by (plus the Service's own labels
// and service.kubernetes.io/headless), the Service as controlling owner,
// one slice per address family and set of resolved ports (a named
// targetPort is resolved against each pod's container ports), at most 100
// endpoints each, conditions ready, serving and terminating from the
// pod's Ready condition and deletionTimestamp (publishNotReadyAddresses
// makes every endpoint ready and serving), addresses from status.podIPs,
// nodeName, and the node's topology.kubernetes.io/zone label as zone. An
// update reuses existing slices to limit churn, as upstream's reconciler
// does: endpoints stay in the slice that holds them, new ones fill slices
// being written anyway before a new slice is made.
//
// Edge choice: every endpoint on a node with a zone or a site carries a
// hint, hints.forZones naming the node's zone, or, when the node has no
// zone, its site (the topology.outpost.dev/site label), so that the
// routing on the edge can prefer endpoints of its own site whether or not
// the fleet labels zones. Upstream sets hints only for topology-aware
// routing; here consumers that honour hints should do so only for
// Services that ask for it (trafficDistribution).
//
// The decisions are pure (Desired, Reconcile); Controller is the thin
// client-go shell that feeds them from informers and writes their plans.
package endpointslice
