package ociimage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// PushOptions says where Push sends an image.
type PushOptions struct {
	// Registry is the registry's base URL, such as "http://127.0.0.1:5000".
	Registry string
	// Repository and Tag name the image there, such as "demo/busybox"
	// and "1".
	Repository, Tag string
	// Username and Password, when set, are sent as basic auth, as a
	// registry with an htpasswd file asks.
	Username, Password string
	Client             *http.Client // nil for http.DefaultClient
}

// Push uploads the image's blobs and manifest with the registry HTTP API
// (distribution spec: monolithic uploads), skipping blobs the registry
// has.
func (im *Image) Push(ctx context.Context, o PushOptions) error {
	b, err := im.build()
	if err != nil {
		return err
	}
	c := o.Client
	if c == nil {
		c = http.DefaultClient
	}
	base := strings.TrimSuffix(o.Registry, "/") + "/v2/" + o.Repository
	do := func(method, u, contentType string, body []byte) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if o.Username != "" {
			req.SetBasicAuth(o.Username, o.Password)
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return resp, nil
	}
	for _, bl := range []blob{b.layer, b.config} {
		resp, err := do(http.MethodHead, base+"/blobs/"+bl.digest, "", nil)
		if err != nil {
			return fmt.Errorf("push %s: %w", bl.digest, err)
		}
		if resp.StatusCode == http.StatusOK {
			continue
		}
		resp, err = do(http.MethodPost, base+"/blobs/uploads/", "", nil)
		if err != nil {
			return fmt.Errorf("push %s: start upload: %w", bl.digest, err)
		}
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("push %s: start upload: %s", bl.digest, resp.Status)
		}
		loc, err := resp.Location()
		if err != nil {
			return fmt.Errorf("push %s: upload location: %w", bl.digest, err)
		}
		q := loc.Query()
		q.Set("digest", bl.digest)
		loc.RawQuery = q.Encode()
		resp, err = do(http.MethodPut, loc.String(), "application/octet-stream", bl.data)
		if err != nil {
			return fmt.Errorf("push %s: upload: %w", bl.digest, err)
		}
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("push %s: upload: %s", bl.digest, resp.Status)
		}
	}
	resp, err := do(http.MethodPut, base+"/manifests/"+url.PathEscape(o.Tag), MediaTypeManifest, b.manifest.data)
	if err != nil {
		return fmt.Errorf("push manifest: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("push manifest: %s", resp.Status)
	}
	return nil
}
