package webhook

import (
	"encoding/json"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
)

// reviewScheme knows the AdmissionReview versions, and metav1.Status, to
// decode webhook answers by.
var reviewScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{admissionv1.AddToScheme, admissionv1beta1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}()

// reviewDecoder decodes JSON by the scheme, without conversion, as
// upstream's webhook client does.
var reviewDecoder = serializer.NewCodecFactory(reviewScheme).UniversalDeserializer()

// reviewVersion returns the AdmissionReview version to send a webhook
// that accepts versions: the first it lists that is known.
func reviewVersion(versions []string) (string, error) {
	for _, v := range versions {
		if v == "v1" || v == "v1beta1" {
			return v, nil
		}
	}
	return "", errors.New("webhook does not accept known AdmissionReview versions (v1, v1beta1)")
}

// encodeReview returns the AdmissionReview of version for r with uid.
func encodeReview(version string, uid types.UID, r *request) ([]byte, error) {
	obj, err := encodeObject(r.obj, r.gvk)
	if err != nil {
		return nil, err
	}
	old, err := encodeObject(r.old, r.gvk)
	if err != nil {
		return nil, err
	}
	opts, err := json.Marshal(r.options())
	if err != nil {
		return nil, err
	}
	ui := authenticationv1.UserInfo{Username: r.user.GetName(), UID: r.user.GetUID(), Groups: r.user.GetGroups(), Extra: map[string]authenticationv1.ExtraValue{}}
	for k, v := range r.user.GetExtra() {
		ui.Extra[k] = v
	}
	kind := metav1.GroupVersionKind(r.gvk)
	res := metav1.GroupVersionResource(r.gvr)
	dry := r.dryRun
	raw := func(b []byte) runtime.RawExtension { return runtime.RawExtension{Raw: b} }
	if version == "v1beta1" {
		return json.Marshal(&admissionv1beta1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: admissionv1beta1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
			Request: &admissionv1beta1.AdmissionRequest{
				UID: uid, Kind: kind, Resource: res, SubResource: r.subresource,
				RequestKind: &kind, RequestResource: &res, RequestSubResource: r.subresource,
				Name: r.name, Namespace: r.namespace, Operation: admissionv1beta1.Operation(r.op), UserInfo: ui,
				Object: raw(obj), OldObject: raw(old), DryRun: &dry, Options: raw(opts),
			},
		})
	}
	return json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: uid, Kind: kind, Resource: res, SubResource: r.subresource,
			RequestKind: &kind, RequestResource: &res, RequestSubResource: r.subresource,
			Name: r.name, Namespace: r.namespace, Operation: admissionv1.Operation(r.op), UserInfo: ui,
			Object: raw(obj), OldObject: raw(old), DryRun: &dry, Options: raw(opts),
		},
	})
}

// response is what a webhook answered, checked.
type response struct {
	allowed bool
	// patch is a JSONPatch, nil for none.
	patch  []byte
	result *metav1.Status
}

// errNoResponse is the check of an answer without one.
var errNoResponse = errors.New("webhook response was absent")

// decodeResponse decodes a webhook's answer of a successful HTTP status
// to an AdmissionReview of version with uid and checks it as upstream's
// VerifyAdmissionResponse does. Its errors are of two kinds, as
// upstream's: decodeError for a body that is not an object of a known
// kind, and a plain one for a review that breaks the contract.
func decodeResponse(body []byte, version string, uid types.UID, mutating bool) (*response, error) {
	var into runtime.Object = &admissionv1.AdmissionReview{}
	if version == "v1beta1" {
		into = &admissionv1beta1.AdmissionReview{}
	}
	out, _, err := reviewDecoder.Decode(body, nil, into)
	if err != nil {
		return nil, decodeError{err}
	}
	if st, ok := out.(*metav1.Status); ok && st.Status != metav1.StatusSuccess {
		return nil, decodeError{apierrors.FromObject(st)}
	}
	switch r := into.(type) {
	case *admissionv1.AdmissionReview:
		return verifyV1(r, out == into, uid, mutating)
	case *admissionv1beta1.AdmissionReview:
		if out != into || r.Response == nil {
			return nil, errNoResponse
		}
		res := &response{allowed: r.Response.Allowed, result: r.Response.Result}
		if mutating && len(r.Response.Patch) > 0 {
			res.patch = r.Response.Patch
		}
		return res, nil
	}
	return nil, fmt.Errorf("unexpected response type %T", into)
}

// verifyV1 checks a v1 review; decoded is false when the body was of
// another kind, and the review then empty.
func verifyV1(r *admissionv1.AdmissionReview, decoded bool, uid types.UID, mutating bool) (*response, error) {
	if !decoded || r.Response == nil {
		return nil, errNoResponse
	}
	if r.Response.UID != uid {
		return nil, fmt.Errorf("expected response.uid=%q, got %q", uid, r.Response.UID)
	}
	v1GVK := admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
	if got := r.GroupVersionKind(); got != v1GVK {
		return nil, fmt.Errorf("expected webhook response of %v, got %v", v1GVK.String(), got.String())
	}
	res := &response{allowed: r.Response.Allowed, result: r.Response.Result}
	if !mutating {
		if len(r.Response.Patch) > 0 {
			return nil, errors.New("validating webhook may not return response.patch")
		}
		if r.Response.PatchType != nil {
			return nil, errors.New("validating webhook may not return response.patchType")
		}
		return res, nil
	}
	pt := r.Response.PatchType
	switch {
	case len(r.Response.Patch) > 0 && pt == nil:
		return nil, errors.New("webhook returned response.patch but not response.patchType")
	case len(r.Response.Patch) == 0 && pt != nil:
		return nil, errors.New("webhook returned response.patchType but not response.patch")
	case pt != nil && *pt == "":
		return nil, fmt.Errorf("webhook returned invalid response.patchType of %q", *pt)
	case pt != nil && *pt != admissionv1.PatchTypeJSONPatch:
		return nil, unsupportedPatch(*pt)
	}
	res.patch = r.Response.Patch
	return res, nil
}

// decodeError is a body that did not decode: upstream reports it as a
// failure to call the webhook, where a review that does not check is an
// invalid response.
type decodeError struct{ err error }

func (e decodeError) Error() string { return e.err.Error() }
func (e decodeError) Unwrap() error { return e.err }

// unsupportedPatch is a patch of a type other than JSONPatch, which
// upstream reports as a failure to call the webhook.
type unsupportedPatch admissionv1.PatchType

func (p unsupportedPatch) Error() string { return fmt.Sprintf("unsupported patch type %q", string(p)) }
