package hubd

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-mesh/outpost/firmware/artifacts"
)

// ArtifactsPath is the URL path under which the hub serves its store of
// firmware artifacts: PUT, HEAD and GET of ArtifactsPath+"<sha256 hex>".
// It is a non-resource URL, authorized as such: PUT as the verb put, GET
// and HEAD as get (RBAC nonResourceURLs "/firmware/v1/artifacts/*").
const ArtifactsPath = "/firmware/v1/artifacts/sha256/"

// artifactsMount is the mux pattern of the artifact handler: anything
// under it that is not ArtifactsPath+digest is answered 404 by it.
const artifactsMount = "/firmware/v1/artifacts/"

// FirmwareArtifactsDir is the directory under Config.DataDir of the
// firmware artifact store (firmware/artifacts).
const FirmwareArtifactsDir = "firmware/artifacts"

// DefaultMaxArtifactBytes is the default of Config.MaxArtifactBytes.
const DefaultMaxArtifactBytes = 1 << 30

// artifactHandler serves the firmware artifact store over HTTP: an
// upload is streamed into the store, which hashes it as it writes and
// keeps it only if it has the digest its path names, so no request makes
// the hub hold more than a copy buffer of its body in memory.
type artifactHandler struct {
	store    *artifacts.Store
	maxBytes int64 // the largest body a PUT may have
	log      *slog.Logger
}

// parseArtifactPath returns the digest that path names, a valid one
// (artifacts.ValidDigest) or not (ok false with the path under
// ArtifactsPath: a bad digest, 400); under is false for any other path
// (404).
func parseArtifactPath(path string) (digest string, under, ok bool) {
	rest, under := strings.CutPrefix(path, ArtifactsPath)
	if !under || rest == "" {
		return "", false, false
	}
	if !artifacts.ValidDigest(rest) {
		return "", true, false
	}
	return rest, true, true
}

func (a *artifactHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	digest, under, ok := parseArtifactPath(r.URL.Path)
	switch {
	case !under:
		writeStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	case !ok:
		writeStatus(w, http.StatusBadRequest, "BadRequest", "an artifact is addressed by its sha256, 64 lowercase hex digits: "+ArtifactsPath+"<sha256>")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		a.get(w, r, digest)
	case http.MethodPut:
		a.put(w, r, digest)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		writeStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", fmt.Sprintf("the server does not allow this method on %s", r.URL.Path))
	}
}

// get serves the artifact, with ranges (a resumed download asks for the
// rest) and its digest as its ETag.
func (a *artifactHandler) get(w http.ResponseWriter, r *http.Request, digest string) {
	b, err := a.store.Open(digest)
	switch {
	case errors.Is(err, artifacts.ErrNotFound):
		writeStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("artifact %s not found", digest))
		return
	case err != nil:
		a.log.Warn("open firmware artifact", "sha256", digest, "err", err)
		writeStatus(w, http.StatusInternalServerError, "InternalError", "Internal error occurred: reading the artifact failed")
		return
	}
	defer b.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("ETag", `"sha256:`+digest+`"`)
	w.Header().Set("Cache-Control", "private, immutable")
	http.ServeContent(w, r, "", time.Time{}, io.NewSectionReader(b, 0, b.Size()))
}

// put stores the request's body as the artifact of digest: 201 when it
// was stored, 200 when the store held it already (the body is not read).
func (a *artifactHandler) put(w http.ResponseWriter, r *http.Request, digest string) {
	size := r.ContentLength
	switch {
	case size < 0:
		writeStatus(w, http.StatusLengthRequired, "LengthRequired", "an artifact upload needs a Content-Length")
		return
	case size == 0:
		writeStatus(w, http.StatusBadRequest, "BadRequest", "an artifact is at least 1 byte")
		return
	case size > a.maxBytes:
		writeStatus(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge",
			fmt.Sprintf("the artifact is %d bytes, over the hub's limit of %d", size, a.maxBytes))
		return
	}
	code := http.StatusCreated
	if have, ok := a.store.Stat(digest); ok && have == size {
		code = http.StatusOK
	}
	// The server ends the body at Content-Length; a shorter body fails
	// the read with io.ErrUnexpectedEOF.
	err := a.store.Put(r.Context(), r.Body, digest, size)
	var mismatch *artifacts.MismatchError
	switch {
	case errors.As(err, &mismatch):
		writeStatus(w, http.StatusBadRequest, "BadRequest", "the body does not match the artifact's address: "+mismatch.Error())
		return
	case err != nil && r.Context().Err() != nil:
		a.log.Debug("firmware artifact upload ended by the client", "sha256", digest, "err", err)
		writeStatus(w, http.StatusBadRequest, "BadRequest", "the upload ended early")
		return
	case err != nil:
		if errors.Is(err, io.ErrUnexpectedEOF) {
			writeStatus(w, http.StatusBadRequest, "BadRequest", "the body is not Content-Length bytes long")
			return
		}
		a.log.Warn("store firmware artifact", "sha256", digest, "err", err)
		writeStatus(w, http.StatusInternalServerError, "InternalError", "Internal error occurred: storing the artifact failed")
		return
	}
	a.log.Info("firmware artifact stored", "sha256", digest, "size", size, "new", code == http.StatusCreated)
	w.Header().Set("Location", ArtifactsPath+digest)
	writeJSON(w, code, map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Success", "code": code, "message": "artifact " + digest + " stored, " + strconv.FormatInt(size, 10) + " bytes",
	})
}
