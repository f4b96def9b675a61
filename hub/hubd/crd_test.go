package hubd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// gadgetsCRD has a schema with a default, a bound, a CEL rule, printer
// columns and the status subresource, in two served versions.
const gadgetsCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.outpost.dev
spec:
  group: example.outpost.dev
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd], categories: [all]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: "self.size <= 10 || self.color == 'red'"
              message: "only red gadgets may be larger than 10"
            properties:
              size: {type: integer, minimum: 1, maximum: 100}
              color: {type: string, default: blue}
          status:
            type: object
            properties:
              ready: {type: boolean}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// TestCustomResourceDefinitionKubectl runs kubectl 1.27 and 1.33 against
// a hub: a CRD is created and its names accepted, its objects are
// defaulted, refused with unknown fields (kubectl's strict validation) or
// pruned of them (without), refused with field paths when invalid (schema
// and CEL), listed with the CRD's printer columns,
// explained from its schema in the OpenAPI documents, watched, applied
// server-side, and read in both versions; deleting the CRD deletes its
// objects first.
func TestCustomResourceDefinitionKubectl(t *testing.T) {
	dir := t.TempDir()
	h, _ := startHub(t, dir)
	cfg := adminConfig(t, h)
	dc := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	gvr := schema.GroupVersionResource{Group: "example.outpost.dev", Version: "v1", Resource: "gadgets"}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

	for _, version := range []string{"1.27", "1.33"} {
		t.Run("kubectl-"+version, func(t *testing.T) {
			bin := filepath.Join(kubectlDir, "kubectl."+version)
			if _, err := os.Stat(bin); err != nil {
				t.Skipf("kubectl %s not installed: %v", version, err)
			}
			kubectl := func(stdin string, args ...string) (string, error) {
				t.Helper()
				cmd := exec.Command(bin, append([]string{"--kubeconfig", h.KubeconfigPath()}, args...)...)
				cmd.Env = append(os.Environ(), "HOME="+dir)
				cmd.Stdin = strings.NewReader(stdin)
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			must := func(stdin string, args ...string) string {
				t.Helper()
				out, err := kubectl(stdin, args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			must(gadgetsCRD, "apply", "-f", "-")
			wait.For(t, 30*time.Second, "the gadgets to be served", func() (bool, string) {
				out, err := kubectl("", "get", "gadgets", "-A")
				return err == nil, out
			})
			w, err := dc.Resource(gvr).Namespace("default").Watch(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()

			// kubectl asks for strict field validation: a field the
			// schema does not know is refused, as upstream; without
			// validation it is pruned.
			small := "apiVersion: example.outpost.dev/v1\nkind: Gadget\nmetadata: {name: small}\nspec: {size: 3, shape: round}\n"
			if out, err := kubectl(small, "apply", "-n", "default", "-f", "-"); err == nil || !strings.Contains(out, `unknown field "spec.shape"`) {
				t.Errorf("a gadget with an unknown field: %v\n%s", err, out)
			}
			must(small, "apply", "--validate=false", "-n", "default", "-f", "-")
			got, err := dc.Resource(gvr).Namespace("default").Get(ctx, "small", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if color, _, _ := unstructured.NestedString(got.Object, "spec", "color"); color != "blue" {
				t.Errorf("spec.color = %q, want the default blue", color)
			}
			if _, has, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "shape"); has {
				t.Errorf("spec.shape, unknown to the schema, was kept: %v", got.Object["spec"])
			}

			// Invalid objects: the schema's bound and the CEL rule, with
			// their field paths.
			out, err := kubectl("apiVersion: example.outpost.dev/v1\nkind: Gadget\nmetadata: {name: huge}\nspec: {size: 200}\n", "apply", "-n", "default", "-f", "-")
			if err == nil || !strings.Contains(out, "spec.size") || !strings.Contains(out, "less than or equal to 100") {
				t.Errorf("a gadget of size 200: %v\n%s", err, out)
			}
			out, err = kubectl("apiVersion: example.outpost.dev/v1\nkind: Gadget\nmetadata: {name: big}\nspec: {size: 20}\n", "apply", "-n", "default", "-f", "-")
			if err == nil || !strings.Contains(out, "only red gadgets may be larger than 10") || !strings.Contains(out, "spec") {
				t.Errorf("a blue gadget of size 20: %v\n%s", err, out)
			}

			// Server-side apply, and the printer columns.
			must("apiVersion: example.outpost.dev/v1\nkind: Gadget\nmetadata: {name: big}\nspec: {size: 20, color: red}\n",
				"apply", "--server-side", "--field-manager", "test", "-n", "default", "-f", "-")
			out = must("", "get", "gadgets", "-n", "default")
			if !strings.Contains(out, "SIZE") || !strings.Contains(out, "COLOR") || !strings.Contains(out, "red") {
				t.Errorf("kubectl get gadgets:\n%s\nwant the SIZE and COLOR columns", out)
			}
			out = must("", "get", "gd", "big", "-n", "default", "-o", "yaml", "--show-managed-fields")
			if !strings.Contains(out, "manager: test") || !strings.Contains(out, "operation: Apply") {
				t.Errorf("managedFields of an applied gadget:\n%s", out)
			}
			// The OpenAPI documents follow the CRD soon after discovery.
			wait.For(t, 30*time.Second, "kubectl explain to describe gadgets.spec.size", func() (bool, string) {
				out, err := kubectl("", "explain", "gadgets.spec.size")
				return err == nil && strings.Contains(out, "integer"), out
			})
			out = must("", "get", "gadgets.v1beta1.example.outpost.dev", "big", "-n", "default", "-o", "jsonpath={.apiVersion}")
			if out != "example.outpost.dev/v1beta1" {
				t.Errorf("big read as v1beta1: apiVersion %q", out)
			}

			seen := map[string]bool{}
			wait.For(t, 10*time.Second, "the watch to see both gadgets", func() (bool, string) {
				select {
				case ev := <-w.ResultChan():
					if ev.Type == watch.Added {
						seen[ev.Object.(*unstructured.Unstructured).GetName()] = true
					}
				default:
				}
				return seen["small"] && seen["big"], fmt.Sprint(seen)
			})

			must("", "delete", "crd", "gadgets.example.outpost.dev")
			if _, err := dc.Resource(crdGVR).Get(ctx, "gadgets.example.outpost.dev", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the CRD after kubectl delete returned: %v, want it gone", err)
			}
			// The hub stops serving them once it sees the CRD go.
			wait.For(t, 10*time.Second, "the gadgets no longer served", func() (bool, string) {
				_, err := dc.Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{})
				return apierrors.IsNotFound(err), fmt.Sprint(err)
			})
		})
	}
}
