package pki

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
	"github.com/outpost-mesh/outpost/internal/limitread"
)

// Kubeconfig is the part of a kubeconfig file (client-go's clientcmd v1
// Config) that Outpost writes: clusters, users and contexts with their
// credentials embedded. Byte fields hold PEM and appear base64 in the file.
type Kubeconfig struct {
	APIVersion     string         `json:"apiVersion"`
	Kind           string         `json:"kind"`
	Clusters       []NamedCluster `json:"clusters"`
	Users          []NamedUser    `json:"users"`
	Contexts       []NamedContext `json:"contexts"`
	CurrentContext string         `json:"current-context"`
	Preferences    struct{}       `json:"preferences"`
}

// NamedCluster is a cluster entry of a kubeconfig.
type NamedCluster struct {
	Name    string  `json:"name"`
	Cluster Cluster `json:"cluster"`
}

// Cluster says where an API server is and which CA it is signed by.
type Cluster struct {
	Server                   string `json:"server"`
	CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
}

// NamedUser is a user entry of a kubeconfig.
type NamedUser struct {
	Name string   `json:"name"`
	User AuthInfo `json:"user"`
}

// AuthInfo holds a client's credentials.
type AuthInfo struct {
	ClientCertificateData []byte `json:"client-certificate-data,omitempty"`
	ClientKeyData         []byte `json:"client-key-data,omitempty"`
	Token                 string `json:"token,omitempty"`
}

// NamedContext is a context entry of a kubeconfig.
type NamedContext struct {
	Name    string  `json:"name"`
	Context Context `json:"context"`
}

// Context pairs a cluster with a user.
type Context struct {
	Cluster   string `json:"cluster"`
	User      string `json:"user"`
	Namespace string `json:"namespace,omitempty"`
}

// ClusterName names the cluster, user and context of the kubeconfig files
// the hub writes.
const ClusterName = "outpost"

// maxKubeconfigSize bounds what ReadKubeconfig reads.
const maxKubeconfigSize = 1 << 20

// AdminKubeconfig returns a kubeconfig that reaches the API server at server
// (an https URL) as the admin user, with the cluster, user and context all
// named ClusterName.
func (p *PKI) AdminKubeconfig(server string) *Kubeconfig {
	return &Kubeconfig{
		APIVersion: "v1",
		Kind:       "Config",
		Clusters: []NamedCluster{{Name: ClusterName, Cluster: Cluster{
			Server:                   server,
			CertificateAuthorityData: p.CACertPEM,
		}}},
		Users: []NamedUser{{Name: ClusterName, User: AuthInfo{
			ClientCertificateData: p.AdminCertPEM,
			ClientKeyData:         p.AdminKeyPEM,
		}}},
		Contexts: []NamedContext{{Name: ClusterName, Context: Context{
			Cluster: ClusterName,
			User:    ClusterName,
		}}},
		CurrentContext: ClusterName,
	}
}

// WriteKubeconfig writes k to path atomically with mode 0600 (it holds a
// private key). A file that already has the same content is left alone.
func WriteKubeconfig(path string, k *Kubeconfig) error {
	data, err := yaml.Marshal(k)
	if err != nil {
		return fmt.Errorf("marshal kubeconfig: %w", err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// ReadKubeconfig parses the kubeconfig file at path. Fields Outpost does not
// use are ignored.
func ReadKubeconfig(path string) (*Kubeconfig, error) {
	data, err := limitread.File(path, maxKubeconfigSize)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig: %w", err)
	}
	var k Kubeconfig
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("parse kubeconfig %s: %w", path, err)
	}
	if k.Kind != "Config" {
		return nil, fmt.Errorf("parse kubeconfig %s: kind is %q, want Config", path, k.Kind)
	}
	return &k, nil
}

// Context returns the cluster and user of the named context.
func (k *Kubeconfig) Context(name string) (*Cluster, *AuthInfo, error) {
	var ctx *Context
	for i := range k.Contexts {
		if k.Contexts[i].Name == name {
			ctx = &k.Contexts[i].Context
		}
	}
	if ctx == nil {
		return nil, nil, fmt.Errorf("kubeconfig has no context %q", name)
	}
	var cluster *Cluster
	for i := range k.Clusters {
		if k.Clusters[i].Name == ctx.Cluster {
			cluster = &k.Clusters[i].Cluster
		}
	}
	var user *AuthInfo
	for i := range k.Users {
		if k.Users[i].Name == ctx.User {
			user = &k.Users[i].User
		}
	}
	if cluster == nil || user == nil {
		return nil, nil, errors.New("kubeconfig context names a missing cluster or user")
	}
	return cluster, user, nil
}
