package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
)

// entries reads a tar into name -> content.
func entries(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		c, _ := io.ReadAll(tr)
		out[h.Name] = c
	}
}

func busybox(t *testing.T) *Image {
	t.Helper()
	im, err := Busybox("outpost.test/busybox:1")
	if errors.Is(err, ErrNoBusybox) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return im
}

func TestWriteOCI(t *testing.T) {
	im := busybox(t)
	var a, b bytes.Buffer
	if err := im.WriteOCI(&a); err != nil {
		t.Fatal(err)
	}
	if err := im.WriteOCI(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two writes of one image differ")
	}
	e := entries(t, a.Bytes())
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(e["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != im.Name {
		t.Fatalf("index = %s", e["index.json"])
	}
	d := index.Manifests[0].Digest
	if _, ok := e["blobs/sha256/"+d[len("sha256:"):]]; !ok {
		t.Errorf("manifest blob %s missing", d)
	}
	if _, ok := e["oci-layout"]; !ok {
		t.Error("oci-layout missing")
	}
}

func TestWriteDockerArchive(t *testing.T) {
	im := busybox(t)
	var buf bytes.Buffer
	if err := im.WriteDockerArchive(&buf); err != nil {
		t.Fatal(err)
	}
	e := entries(t, buf.Bytes())
	var man []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(e["manifest.json"], &man); err != nil {
		t.Fatal(err)
	}
	if len(man) != 1 || man[0].RepoTags[0] != im.Name || len(man[0].Layers) != 1 {
		t.Fatalf("manifest.json = %s", e["manifest.json"])
	}
	layer := entries(t, e[man[0].Layers[0]])
	if _, ok := layer["bin/busybox"]; !ok {
		t.Error("layer has no bin/busybox")
	}
	if _, ok := layer["etc/passwd"]; !ok {
		t.Error("layer has no etc/passwd")
	}
}

func TestPush(t *testing.T) {
	im := busybox(t)
	ctx := context.Background()
	for _, auth := range []bool{false, true} {
		user, pass := "", ""
		if auth {
			user, pass = "puller", "s3cret"
		}
		r, err := StartRegistry(ctx, t.TempDir(), user, pass)
		if errors.Is(err, ErrNoRegistry) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		o := PushOptions{Registry: r.URL(), Repository: "test/busybox", Tag: "1", Username: user, Password: pass}
		if err := im.Push(ctx, o); err != nil {
			t.Fatalf("Push (auth %v): %v", auth, err)
		}
		req, _ := http.NewRequest(http.MethodGet, r.URL()+"/v2/test/busybox/manifests/1", nil)
		req.Header.Set("Accept", MediaTypeManifest)
		if auth {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET manifest without auth: %s, want 401", resp.Status)
			}
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET manifest (auth %v): %s", auth, resp.Status)
		}
		if auth {
			if err := im.Push(ctx, PushOptions{Registry: r.URL(), Repository: "test/busybox", Tag: "2"}); err == nil {
				t.Error("Push without credentials to a registry that asks for them succeeded")
			}
		}
	}
}
