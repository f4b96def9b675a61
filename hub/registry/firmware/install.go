package firmware

import (
	"context"
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// FieldManager is the field manager under which Install applies the
// definitions.
const FieldManager = "outpost-hub/firmware"

// CRDClient is the part of a CustomResourceDefinition client Install
// uses; the apiextensions clientset's
// ApiextensionsV1().CustomResourceDefinitions() is one.
type CRDClient interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*apiextensionsv1.CustomResourceDefinition, error)
}

// Install creates the definitions of CRDs, or brings existing ones up to
// date, by a forced server-side apply as FieldManager: a hub that starts
// with changed definitions replaces what an older hub installed, and a
// hub restarted unchanged writes nothing new. Fields other managers set
// on the definitions (labels, say) are kept.
func Install(ctx context.Context, c CRDClient) error {
	force := true
	for _, crd := range CRDs() {
		data, err := applyBody(crd)
		if err != nil {
			return err
		}
		if _, err := c.Patch(ctx, crd.Name, types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
			return fmt.Errorf("install customresourcedefinition %s: %w", crd.Name, err)
		}
	}
	return nil
}

// applyBody returns crd as an apply configuration: its type, name and
// spec, without the empty status and creation time its Go type encodes.
func applyBody(crd *apiextensionsv1.CustomResourceDefinition) ([]byte, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		return nil, fmt.Errorf("encode customresourcedefinition %s: %w", crd.Name, err)
	}
	body := map[string]any{
		"apiVersion": m["apiVersion"], "kind": m["kind"],
		"metadata": map[string]any{"name": crd.Name},
		"spec":     m["spec"],
	}
	return json.Marshal(body)
}
