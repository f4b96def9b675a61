package webhook

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// FuzzDecodeResponse: no answer of a webhook crashes its decoding, and
// one that decodes to an allowed review with a patch is only accepted of
// a mutating webhook.
func FuzzDecodeResponse(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true,"patch":"W10=","patchType":"JSONPatch"}}`,
		`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","response":{"allowed":false,"status":{"code":403,"message":"no"}}}`,
		`{"apiVersion":"v1","kind":"Status","status":"Failure","code":500,"message":"broken"}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","patchType":""}}`,
		`garbage`, `{}`, `null`, `[]`,
	} {
		f.Add([]byte(s), false, true)
	}
	f.Fuzz(func(t *testing.T, body []byte, beta, mutating bool) {
		if len(body) > DefaultMaxResponseBytes {
			t.Skip() // post refuses it before decoding
		}
		version := "v1"
		if beta {
			version = "v1beta1"
		}
		res, err := decodeResponse(body, version, types.UID("u"), mutating)
		if err == nil && !mutating && len(res.patch) > 0 {
			t.Errorf("decodeResponse(%q) for a validating webhook kept a patch", body)
		}
	})
}
