package wire

import (
	"errors"
	"fmt"
	"strings"
)

// Resources that travel on the sync connection, by their API plural.
const (
	ResourceNodes           = "nodes"
	ResourcePods            = "pods"
	ResourceConfigMaps      = "configmaps"
	ResourceSecrets         = "secrets"
	ResourceServiceAccounts = "serviceaccounts"
	ResourceServices        = "services"
	ResourceEndpointSlices  = "endpointslices"
	ResourceEvents          = "events"
	// ResourcePodTokens is no API resource: its objects are the service
	// account tokens the hub mints for the pods of a node's view (see
	// PodTokens), since capability version 3.
	ResourcePodTokens = "podtokens"
	// ResourceMeshKeys is no API resource either: its objects are the
	// keys of a site's mesh, which the hub derives for the nodes of the
	// site (see MeshKeys), since capability version 5.
	ResourceMeshKeys = "meshkeys"
)

// FirmwareTrustKey is the ConfigMap that holds the public keys a release
// of firmware must be signed with (firmware/trust reads it): unlike other
// configmaps it is in every node's view, so that a node learns the keys at
// join and keeps them in its checkpoint.
var FirmwareTrustKey = Key{Resource: ResourceConfigMaps, Namespace: "kube-system", Name: "outpost-firmware-trust"}

// Key names one object: its resource, namespace ("" for cluster-scoped
// objects such as nodes) and name.
type Key struct {
	Resource  string
	Namespace string
	Name      string
}

// maxKeyPart bounds each part of a key: Kubernetes names are at most 253
// bytes.
const maxKeyPart = 253

// ErrInvalidKey is returned (wrapped) for a key that is not
// resource/namespace/name with a non-empty resource and name.
var ErrInvalidKey = errors.New("invalid object key")

// String returns "resource/namespace/name"; the namespace is empty for
// cluster-scoped objects ("nodes//edge-1").
func (k Key) String() string { return k.Resource + "/" + k.Namespace + "/" + k.Name }

// Validate reports whether k can be written and read back.
func (k Key) Validate() error {
	switch {
	case k.Resource == "" || k.Name == "":
		return fmt.Errorf("%w %q: resource and name are required", ErrInvalidKey, k.String())
	case len(k.Resource) > maxKeyPart || len(k.Namespace) > maxKeyPart || len(k.Name) > maxKeyPart:
		return fmt.Errorf("%w: a part is over %d bytes", ErrInvalidKey, maxKeyPart)
	case strings.Contains(k.Resource, "/") || strings.Contains(k.Namespace, "/") || strings.Contains(k.Name, "/"):
		return fmt.Errorf("%w %q: a part holds a slash", ErrInvalidKey, k.String())
	}
	return nil
}

// ParseKey parses the form String returns.
func ParseKey(s string) (Key, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return Key{}, fmt.Errorf("%w %q: want resource/namespace/name", ErrInvalidKey, s)
	}
	k := Key{Resource: parts[0], Namespace: parts[1], Name: parts[2]}
	return k, k.Validate()
}
