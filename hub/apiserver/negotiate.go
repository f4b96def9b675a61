package apiserver

import (
	"fmt"
	"mime"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// output is the negotiated response form.
type output struct {
	info  runtime.SerializerInfo
	table bool // as=Table;g=meta.k8s.io;v=v1
	// partial serves metadata only: as=PartialObjectMetadata (or its List)
	// in meta.k8s.io/v1, as metadata informers ask.
	partial bool
}

// asParam returns the Content-Type parameters of out's form.
func (o output) asParam() string {
	switch {
	case o.table:
		return ";as=Table;v=v1;g=meta.k8s.io"
	case o.partial:
		return ";as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
	}
	return ""
}

// negotiate picks the response encoding from the Accept header among
// those c offers, as kube-apiserver does: JSON, YAML or protobuf,
// optionally as a Table. An empty or */* Accept gets JSON.
func negotiate(r *http.Request, c codec, tableOK bool) (output, error) {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return output{info: c.json()}, nil
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		if as := params["as"]; as != "" {
			// Tables come in JSON and YAML, as upstream: they have no
			// protobuf form.
			if as == "Table" && tableOK && params["g"] == "meta.k8s.io" && params["v"] == "v1" && mt != runtime.ContentTypeProtobuf {
				if info, ok := c.lookup(mt); ok {
					return output{info: info, table: true}, nil
				}
			}
			if (as == "PartialObjectMetadata" || as == "PartialObjectMetadataList") && params["g"] == "meta.k8s.io" && params["v"] == "v1" {
				if info, ok := c.lookup(mt); ok {
					return output{info: info, partial: true}, nil
				}
			}
			continue // PartialObjectMetadata and older Table versions: not offered
		}
		switch mt {
		case "*/*", "application/*":
			return output{info: c.json()}, nil
		}
		if info, ok := c.lookup(mt); ok {
			return output{info: info}, nil
		}
	}
	return output{}, notAcceptable()
}

// requestDecoder returns the decoder for the request body's Content-Type
// among those c offers, strict when fieldValidation=Strict.
func requestDecoder(r *http.Request, c codec, strict bool) (runtime.Decoder, string, error) {
	ct := r.Header.Get("Content-Type")
	mt := runtime.ContentTypeJSON
	if ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return nil, "", unsupportedMediaType(ct, c)
		}
	}
	info, ok := c.lookup(mt)
	switch {
	case !ok:
		return nil, mt, unsupportedMediaType(ct, c)
	case strict && info.StrictSerializer != nil:
		return info.StrictSerializer, mt, nil
	}
	return info.Serializer, mt, nil
}

func unsupportedMediaType(ct string, c codec) error {
	var accepted []string
	for _, info := range c.media {
		accepted = append(accepted, info.MediaType)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
		Reason:  metav1.StatusReasonUnsupportedMediaType,
		Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s (got %q)", strings.Join(accepted, ", "), ct),
	}}
}
