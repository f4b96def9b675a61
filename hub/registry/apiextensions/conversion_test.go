package apiextensions_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/registry/apiextensions"
)

// hostsWebhook is a conversion webhook on loopback between the two
// versions of hostCRD: v1's spec.host and spec.port, v2's spec.address
// "host:port". It labels what it converts, and can be told to answer
// badly.
type hostsWebhook struct {
	srv *httptest.Server
	ca  []byte

	mu sync.Mutex
	// reviews are the ConversionReviews' apiVersions, as they came.
	reviews []string
	// rename makes the webhook change the objects' names.
	rename bool
}

func newHostsWebhook(t *testing.T) *hostsWebhook {
	h := &hostsWebhook{}
	h.srv = httptest.NewTLSServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	h.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.srv.Certificate().Raw})
	return h
}

func (h *hostsWebhook) serve(w http.ResponseWriter, r *http.Request) {
	var review struct {
		APIVersion string                             `json:"apiVersion"`
		Kind       string                             `json:"kind"`
		Request    *apiextensionsv1.ConversionRequest `json:"request"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil || r.URL.Path != "/convert" {
		http.Error(w, fmt.Sprintf("bad review %q at %s: %v", body, r.URL.Path, err), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.reviews = append(h.reviews, review.APIVersion)
	rename := h.rename
	h.mu.Unlock()
	resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for _, raw := range review.Request.Objects {
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		switch review.Request.DesiredAPIVersion {
		case "example.outpost.dev/v2":
			spec = map[string]any{"address": fmt.Sprintf("%v:%v", spec["host"], spec["port"])}
		case "example.outpost.dev/v1":
			host, port, _ := strings.Cut(fmt.Sprint(spec["address"]), ":")
			var p int64
			fmt.Sscan(port, &p)
			spec = map[string]any{"host": host, "port": p}
		default:
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: "cannot convert to " + review.Request.DesiredAPIVersion}
		}
		u.Object["spec"] = spec
		u.SetAPIVersion(review.Request.DesiredAPIVersion)
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["converted"] = "true"
		u.SetLabels(labels)
		u.SetFinalizers([]string{"webhook.example/ignored"}) // not the webhook's to change
		if rename {
			u.SetName(u.GetName() + "-renamed")
		}
		out, _ := u.MarshalJSON()
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"apiVersion": review.APIVersion, "kind": "ConversionReview", "response": resp})
}

// count returns how many reviews of apiVersion the webhook had.
func (h *hostsWebhook) count(apiVersion string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.reviews {
		if v == apiVersion {
			n++
		}
	}
	return n
}

// hostCRD returns a CRD of two versions, v1 and v2, converted by the
// webhook at url, stored at storage and spoken to in reviewVersions.
func hostCRD(url string, ca []byte, storage string, reviewVersions ...string) *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	version := func(name string, spec map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: name == storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"spec": {Type: "object", Properties: spec},
				},
			}},
		}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "hosts.example.outpost.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.outpost.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "hosts", Kind: "Host"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				version("v1", map[string]apiextensionsv1.JSONSchemaProps{"host": str, "port": {Type: "integer"}}),
				version("v2", map[string]apiextensionsv1.JSONSchemaProps{"address": str}),
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To(url), CABundle: ca},
					ConversionReviewVersions: reviewVersions,
				},
			},
		},
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	return crd
}

func hostsGVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "example.outpost.dev", Version: version, Resource: "hosts"}
}

// TestConversionWebhook: a CRD of strategy Webhook stores what is
// written at any version at its storage version and serves it at every
// version, through its webhook on loopback (ConversionReview v1 and
// v1beta1); the webhook may change labels but no other metadata; a
// webhook that answers badly or not at all fails the request with
// upstream's message, and nothing stored is lost.
func TestConversionWebhook(t *testing.T) {
	for _, review := range []string{"v1", "v1beta1"} {
		t.Run(review, func(t *testing.T) {
			hook := newHostsWebhook(t)
			rs, err := apiextensions.CustomResources(hostCRD(hook.srv.URL+"/convert", hook.ca, "v1", review), nil)
			if err != nil {
				t.Fatal(err)
			}
			s := serve(t, rs...)
			ctx := context.Background()
			v1 := s.dynamic.Resource(hostsGVR("v1")).Namespace("default")
			v2 := s.dynamic.Resource(hostsGVR("v2")).Namespace("default")

			w, err := v2.Watch(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			in := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "example.outpost.dev/v2", "kind": "Host",
				"metadata": map[string]any{"name": "db", "labels": map[string]any{"app": "db"}},
				"spec":     map[string]any{"address": "db.local:5432"},
			}}
			created, err := v2.Create(ctx, in, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create at v2: %v", err)
			}
			if got, _, _ := unstructured.NestedString(created.Object, "spec", "address"); got != "db.local:5432" || created.GetAPIVersion() != "example.outpost.dev/v2" {
				t.Errorf("create answered %v, want the object at v2", created.Object)
			}
			// Stored at v1, read at v1.
			got, err := v1.Get(ctx, "db", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			host, _, _ := unstructured.NestedString(got.Object, "spec", "host")
			port, _, _ := unstructured.NestedInt64(got.Object, "spec", "port")
			if host != "db.local" || port != 5432 || got.GetAPIVersion() != "example.outpost.dev/v1" {
				t.Errorf("read at v1: %v, want host db.local, port 5432", got.Object)
			}
			// The webhook's label stays, its finalizer does not.
			if got.GetLabels()["converted"] != "true" || got.GetLabels()["app"] != "db" || len(got.GetFinalizers()) != 0 {
				t.Errorf("metadata at v1: labels %v, finalizers %v; want the webhook's label and no finalizer", got.GetLabels(), got.GetFinalizers())
			}
			if _, err := v1.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "example.outpost.dev/v1", "kind": "Host",
				"metadata": map[string]any{"name": "cache"},
				"spec":     map[string]any{"host": "cache.local", "port": int64(6379)},
			}}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create at v1: %v", err)
			}
			list, err := v2.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var addrs []string
			for _, it := range list.Items {
				a, _, _ := unstructured.NestedString(it.Object, "spec", "address")
				addrs = append(addrs, it.GetName()+"="+a)
			}
			if strings.Join(addrs, ",") != "cache=cache.local:6379,db=db.local:5432" {
				t.Errorf("list at v2 = %v", addrs)
			}
			for _, want := range []string{"db=db.local:5432", "cache=cache.local:6379"} {
				select {
				case ev := <-w.ResultChan():
					u, _ := ev.Object.(*unstructured.Unstructured)
					if ev.Type != watch.Added || u == nil {
						t.Fatalf("watch at v2: %v %v", ev.Type, ev.Object)
					}
					a, _, _ := unstructured.NestedString(u.Object, "spec", "address")
					if got := u.GetName() + "=" + a; got != want {
						t.Errorf("watch at v2 sent %s, want %s", got, want)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("watch at v2: no event for %s", want)
				}
			}
			if hook.count("apiextensions.k8s.io/"+review) == 0 || len(hook.reviews) != hook.count("apiextensions.k8s.io/"+review) {
				t.Errorf("the webhook had reviews %v, want only %s", hook.reviews, review)
			}

			// A webhook that renames: refused, nothing lost.
			hook.mu.Lock()
			hook.rename = true
			hook.mu.Unlock()
			_, err = v2.Get(ctx, "db", metav1.GetOptions{})
			if err == nil || !strings.Contains(err.Error(), "conversion webhook for example.outpost.dev/v1, Kind=Host returned invalid object: must have the same name: db != db-renamed") {
				t.Errorf("read through a renaming webhook: %v", err)
			}
			if _, err := v1.Get(ctx, "db", metav1.GetOptions{}); err != nil {
				t.Errorf("read at the storage version needs no webhook: %v", err)
			}
			// A webhook that is gone.
			hook.srv.Close()
			_, err = v2.Get(ctx, "db", metav1.GetOptions{})
			if err == nil || !strings.Contains(err.Error(), "conversion webhook for example.outpost.dev/v1, Kind=Host failed") {
				t.Errorf("read through a webhook that is gone: %v", err)
			}
		})
	}
}

// TestConversionWebhookEarlierStorage: objects stored at an earlier
// storage version are converted by the webhook when the CRD's storage
// version moves on, at the new storage version too.
func TestConversionWebhookEarlierStorage(t *testing.T) {
	hook := newHostsWebhook(t)
	url := hook.srv.URL + "/convert"
	rs, err := apiextensions.CustomResources(hostCRD(url, hook.ca, "v1", "v1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t)
	if err := s.srv.SetResources("hosts.example.outpost.dev", rs); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.dynamic.Resource(hostsGVR("v1")).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.outpost.dev/v1", "kind": "Host",
		"metadata": map[string]any{"name": "old"},
		"spec":     map[string]any{"host": "old.local", "port": int64(80)},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if rs, err = apiextensions.CustomResources(hostCRD(url, hook.ca, "v2", "v1"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.srv.SetResources("hosts.example.outpost.dev", rs); err != nil {
		t.Fatal(err)
	}
	got, err := s.dynamic.Resource(hostsGVR("v2")).Namespace("default").Get(ctx, "old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, _, _ := unstructured.NestedString(got.Object, "spec", "address"); a != "old.local:80" {
		t.Errorf("an object stored at v1 read at the new storage version v2: %v", got.Object)
	}
}

// TestConversionWebhookUnreachable: a Service webhook with no dialer, or
// no review version this hub speaks, fails reads at other versions with
// the reason, not the hub.
func TestConversionWebhookUnreachable(t *testing.T) {
	crd := hostCRD("https://unused.invalid", nil, "v1", "v1")
	crd.Spec.Conversion.Webhook.ClientConfig = &apiextensionsv1.WebhookClientConfig{
		Service: &apiextensionsv1.ServiceReference{Namespace: "default", Name: "converter", Path: ptr.To("/convert"), Port: ptr.To[int32](443)},
	}
	rs, err := apiextensions.CustomResources(crd, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, rs...)
	ctx := context.Background()
	_, err = s.dynamic.Resource(hostsGVR("v2")).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.outpost.dev/v2", "kind": "Host",
		"metadata": map[string]any{"name": "x"},
		"spec":     map[string]any{"address": "x:1"},
	}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "service webhooks are not served") {
		t.Errorf("create through an unreachable webhook: %v", err)
	}
	if l, err := s.dynamic.Resource(hostsGVR("v1")).Namespace("default").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("after a failed conversion: %v, %v; want nothing stored", l, err)
	}
}
