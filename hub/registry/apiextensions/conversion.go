package apiextensions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1beta1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/webhookclient"
)

const (
	// conversionTimeout bounds a call of a conversion webhook, as
	// upstream's webhook client bounds every request (a CRD cannot set
	// one).
	conversionTimeout = 30 * time.Second
	// maxConversionAnswer bounds a conversion webhook's answer: the
	// objects it converts are each under the store's value limit.
	maxConversionAnswer = 6 << 20
)

// webhookConverter converts a CRD's custom resources between versions
// by calling its conversion webhook with a ConversionReview, as
// upstream's webhook converter does: one object per call (the machinery
// converts objects one at a time), the review version the first of the
// CRD's conversionReviewVersions this hub speaks, and of the answer only
// what conversion may change (the body, labels and annotations) kept.
type webhookConverter struct {
	crd      string
	gk       schema.GroupKind
	versions []string
	// client reaches the webhook, or clientErr says why it cannot.
	client    *webhookclient.Client
	clientErr error
}

// newWebhookConverter returns the converter of crd, whose conversion
// strategy is Webhook; dial reaches a Service's webhook.
func newWebhookConverter(crd *apiextensionsv1.CustomResourceDefinition, dial webhookclient.DialService) *webhookConverter {
	c := &webhookConverter{crd: crd.Name, gk: schema.GroupKind{Group: crd.Spec.Group, Kind: acceptedNames(crd).Kind}}
	conv := crd.Spec.Conversion
	if conv == nil || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		c.clientErr = errors.New("the CRD has no conversion webhook configured")
		return c
	}
	c.versions = conv.Webhook.ConversionReviewVersions
	cc := conv.Webhook.ClientConfig
	cfg := webhookclient.Config{URL: cc.URL, CABundle: cc.CABundle}
	if len(bytes.TrimSpace(cfg.CABundle)) == 0 { // whitespace alone is none, as upstream
		cfg.CABundle = nil
	}
	if s := cc.Service; s != nil {
		cfg.Service = &webhookclient.Service{Namespace: s.Namespace, Name: s.Name, Path: s.Path, Port: s.Port}
	}
	c.client, c.clientErr = webhookclient.New(cfg, dial)
	return c
}

// conversion returns the apiserver.Conversion of the version served of
// the CRD whose objects are stored at storage.
func (c *webhookConverter) conversion(served schema.GroupVersion, storage string) *apiserver.Conversion {
	to := schema.GroupVersion{Group: served.Group, Version: storage}
	return &apiserver.Conversion{
		StorageVersion: storage,
		ToStorage:      func(obj runtime.Object) (runtime.Object, error) { return c.convert(obj, to) },
		FromStorage:    func(obj runtime.Object) (runtime.Object, error) { return c.convert(obj, served) },
	}
}

// conversionReview is a ConversionReview of apiextensions.k8s.io/v1 or
// v1beta1, whose JSON is the same but for apiVersion.
type conversionReview struct {
	metav1.TypeMeta `json:",inline"`
	Request         *apiextensionsv1.ConversionRequest  `json:"request,omitempty"`
	Response        *apiextensionsv1.ConversionResponse `json:"response,omitempty"`
}

// reviewVersion returns the ConversionReview version to send, the first
// of versions this hub speaks.
func reviewVersion(versions []string) (string, error) {
	for _, v := range versions {
		switch v {
		case apiextensionsv1.SchemeGroupVersion.Version, apiextensionsv1beta1.SchemeGroupVersion.Version:
			return v, nil
		}
	}
	return "", errors.New("no supported conversion review versions")
}

// convert returns obj, an *unstructured.Unstructured, at version to;
// obj is left as it is.
func (c *webhookConverter) convert(obj runtime.Object, to schema.GroupVersion) (runtime.Object, error) {
	in, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("conversion webhook for %s: unexpected object %T", c.crd, obj)
	}
	// Nothing to convert: as it is. An object of nothing but apiVersion
	// and kind converts as under strategy None, as upstream.
	if in.GetAPIVersion() == to.String() || len(in.Object) == 2 && in.Object["kind"] != nil && in.Object["apiVersion"] != nil {
		out := &unstructured.Unstructured{Object: maps.Clone(in.Object)}
		out.SetAPIVersion(to.String())
		return out, nil
	}
	gvk := in.GroupVersionKind()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("conversion webhook for %v failed: %v", gvk, fmt.Sprintf(format, args...))
	}
	if c.clientErr != nil {
		return nil, fail("%v", c.clientErr)
	}
	version, err := reviewVersion(c.versions)
	if err != nil {
		return nil, err
	}
	raw, err := in.MarshalJSON()
	if err != nil {
		return nil, fail("%v", err)
	}
	uid := uuid.NewUUID()
	body, err := json.Marshal(conversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: apiextensionsv1.GroupName + "/" + version, Kind: "ConversionReview"},
		Request: &apiextensionsv1.ConversionRequest{
			UID: uid, DesiredAPIVersion: to.String(), Objects: []runtime.RawExtension{{Raw: raw}},
		},
	})
	if err != nil {
		return nil, fail("%v", err)
	}
	answer, err := c.client.Post(context.Background(), conversionTimeout, body, maxConversionAnswer)
	if err != nil {
		return nil, fail("%v", err)
	}
	converted, err := convertedObjects(answer, version, uid)
	if err != nil {
		return nil, fail("%v", err)
	}
	if len(converted) != 1 {
		return nil, fmt.Errorf("conversion webhook for %v returned %d objects, expected 1", gvk, len(converted))
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(converted[0].Raw); err != nil {
		return nil, fmt.Errorf("conversion webhook for %v returned invalid object at index 0: %v", gvk, err)
	}
	if want, got := to, out.GroupVersionKind().GroupVersion(); want != got {
		return nil, fmt.Errorf("conversion webhook for %v returned invalid object at index 0: invalid groupVersion (expected %v, received %v)", gvk, want, got)
	}
	if err := sameObject(in, out); err != nil {
		return nil, fmt.Errorf("conversion webhook for %v returned invalid object: %v", gvk, err)
	}
	if err := restoreMeta(in, out); err != nil {
		return nil, fmt.Errorf("conversion webhook for %v returned invalid metadata: %v", gvk, err)
	}
	return out, nil
}

// convertedObjects returns the objects of a webhook's answer, a
// ConversionReview of version that answers request uid (v1beta1's
// answers were never checked for their kind and uid, nor are they
// here, as upstream).
func convertedObjects(answer []byte, version string, uid types.UID) ([]runtime.RawExtension, error) {
	var review conversionReview
	if err := json.Unmarshal(answer, &review); err != nil {
		return nil, err
	}
	if version == apiextensionsv1.SchemeGroupVersion.Version {
		want := apiextensionsv1.SchemeGroupVersion.WithKind("ConversionReview")
		if got := review.GroupVersionKind(); got != want {
			return nil, fmt.Errorf("expected webhook response of %v, got %v", want, got)
		}
	}
	r := review.Response
	switch {
	case r == nil:
		return nil, errors.New("no response provided")
	case version == apiextensionsv1.SchemeGroupVersion.Version && r.UID != uid:
		return nil, fmt.Errorf("expected response.uid=%q, got %q", uid, r.UID)
	case r.Result.Status != metav1.StatusSuccess && r.Result.Message != "":
		return nil, errors.New(r.Result.Message)
	case r.Result.Status != metav1.StatusSuccess:
		return nil, fmt.Errorf("response.result.status was '%s', not 'Success'", r.Result.Status)
	}
	return r.ConvertedObjects, nil
}

// sameObject checks that a webhook's object out is in: its kind, name,
// namespace and uid.
func sameObject(in, out *unstructured.Unstructured) error {
	for _, f := range []struct{ what, in, out string }{
		{"kind", in.GetKind(), out.GetKind()},
		{"name", in.GetName(), out.GetName()},
		{"namespace", in.GetNamespace(), out.GetNamespace()},
		{"UID", string(in.GetUID()), string(out.GetUID())},
	} {
		if f.in != f.out {
			return fmt.Errorf("must have the same %s: %v != %v", f.what, f.in, f.out)
		}
	}
	return nil
}

// restoreMeta gives converted the metadata of original but for the
// labels and annotations the webhook set, which must be valid.
func restoreMeta(original, converted *unstructured.Unstructured) error {
	answered, ok := converted.Object["metadata"].(map[string]any)
	if !ok {
		return fmt.Errorf("missing metadata in converted object")
	}
	meta, _ := runtime.DeepCopyJSONValue(original.Object["metadata"]).(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	converted.Object["metadata"] = meta
	for _, fld := range []string{"labels", "annotations"} {
		v, found := answered[fld]
		if !found || v == nil {
			delete(meta, fld)
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("invalid metadata.%s of type %T in converted object", fld, v)
		}
		strs := make(map[string]string, len(m))
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("metadata.%s[%s] must be a string, but is %T in converted object", fld, k, v)
			}
			strs[k] = s
		}
		var errs field.ErrorList
		if fld == "labels" {
			errs = metav1validation.ValidateLabels(strs, field.NewPath("metadata", "labels"))
		} else {
			errs = apivalidation.ValidateAnnotations(strs, field.NewPath("metadata", "annotation"))
		}
		if len(errs) > 0 {
			return errs.ToAggregate()
		}
		meta[fld] = m
	}
	return nil
}
