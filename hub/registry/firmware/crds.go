package firmware

import (
	_ "embed"
	"fmt"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

var (
	//go:embed releases.yaml
	releasesYAML []byte
	//go:embed rollouts.yaml
	rolloutsYAML []byte
)

// decoded holds the CRDs decoded once from the embedded files.
var decoded = sync.OnceValues(func() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range []struct {
		name string
		data []byte
	}{{"releases.yaml", releasesYAML}, {"rollouts.yaml", rolloutsYAML}} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(f.data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		out = append(out, crd)
	}
	return out, nil
})

// CRDs returns the CustomResourceDefinitions of Release and Rollout, new
// copies the caller owns. It panics if an embedded definition does not
// decode, which the package's tests rule out: the files are part of the
// program, not input.
func CRDs() []*apiextensionsv1.CustomResourceDefinition {
	crds, err := decoded()
	if err != nil {
		panic(fmt.Sprintf("firmware: embedded CustomResourceDefinition: %v", err))
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, len(crds))
	for i, c := range crds {
		out[i] = c.DeepCopy()
	}
	return out
}
