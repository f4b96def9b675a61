// Command webhook is an admission webhook for test/e2e, built into an
// image and run as a pod on an edge node. It serves HTTPS on :8443 with
// the certificate and key in the environment (TLS_CERT, TLS_KEY, PEM):
// /mutate labels every object mutated=yes, and /validate refuses objects
// labelled deny=yes. Only the standard library, so that it builds
// static and small.
package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"os"
)

// review is the part of an admission.k8s.io/v1 AdmissionReview the
// webhook reads and writes.
type review struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Request    *request  `json:"request,omitempty"`
	Response   *response `json:"response,omitempty"`
}

type request struct {
	UID    string `json:"uid"`
	Object struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	} `json:"object"`
}

type response struct {
	UID       string  `json:"uid"`
	Allowed   bool    `json:"allowed"`
	Status    *status `json:"status,omitempty"`
	PatchType string  `json:"patchType,omitempty"`
	Patch     []byte  `json:"patch,omitempty"`
}

type status struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// serve answers an AdmissionReview with decide's response.
func serve(decide func(*request) *response) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var rv review
		if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&rv); err != nil || rv.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := decide(rv.Request)
		resp.UID = rv.Request.UID
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(review{APIVersion: rv.APIVersion, Kind: rv.Kind, Response: resp})
	}
}

func mutate(req *request) *response {
	op := `[{"op":"add","path":"/metadata/labels/mutated","value":"yes"}]`
	if req.Object.Metadata.Labels == nil {
		op = `[{"op":"add","path":"/metadata/labels","value":{"mutated":"yes"}}]`
	}
	return &response{Allowed: true, PatchType: "JSONPatch", Patch: []byte(op)}
}

func validate(req *request) *response {
	if req.Object.Metadata.Labels["deny"] == "yes" {
		return &response{Status: &status{Code: http.StatusForbidden, Message: "denied by the edge webhook"}}
	}
	return &response{Allowed: true}
}

func main() {
	cert, err := tls.X509KeyPair([]byte(os.Getenv("TLS_CERT")), []byte(os.Getenv("TLS_KEY")))
	if err != nil {
		log.Fatalf("certificate: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate", serve(mutate))
	mux.Handle("/validate", serve(validate))
	srv := &http.Server{Addr: ":8443", Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	log.Fatal(srv.ListenAndServeTLS("", ""))
}
