package hubd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/trust"
	"github.com/outpost-mesh/outpost/hub/controllers/firmwarerelease"
	"github.com/outpost-mesh/outpost/internal/wait"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// do sends one request and returns its code, headers and body.
func do(t *testing.T, c *http.Client, method, url string, body []byte, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, resp.Header, data
}

// TestFirmwareArtifacts: the hub's artifact endpoint stores an upload
// whose body has the digest of its path, serves it back whole and in
// ranges, refuses bad digests, mismatched bodies, oversized and
// length-less uploads, and is authorized as a non-resource URL: a user
// without rights gets 403, one granted get may read but not write.
func TestFirmwareArtifacts(t *testing.T) {
	h, _ := startHub(t, t.TempDir(), noControllers, func(c *Config) { c.MaxArtifactBytes = 1 << 20 })
	c, server := adminClient(t, h.KubeconfigPath())
	data := bytes.Repeat([]byte("agent binary "), 20000)
	d := sha(data)
	url := server + ArtifactsPath + d

	if code, _, body := do(t, c, http.MethodHead, url, nil, nil); code != http.StatusNotFound {
		t.Fatalf("HEAD before upload = %d %s, want 404", code, body)
	}
	code, _, body := do(t, c, http.MethodGet, url, nil, nil)
	if code != http.StatusNotFound {
		t.Fatalf("GET before upload = %d, want 404", code)
	}
	wantStatus(t, body, http.StatusNotFound, "NotFound")

	other := append([]byte("tampered "), data[9:]...)
	code, _, body = do(t, c, http.MethodPut, url, other, nil)
	if code != http.StatusBadRequest {
		t.Fatalf("PUT of other bytes = %d %s, want 400", code, body)
	}
	wantStatus(t, body, http.StatusBadRequest, "BadRequest")

	if code, _, body := do(t, c, http.MethodPut, url, data, nil); code != http.StatusCreated {
		t.Fatalf("PUT = %d %s, want 201", code, body)
	}
	if code, _, body := do(t, c, http.MethodPut, url, data, nil); code != http.StatusOK {
		t.Fatalf("second PUT = %d %s, want 200", code, body)
	}
	code, hdr, _ := do(t, c, http.MethodHead, url, nil, nil)
	if code != http.StatusOK || hdr.Get("Content-Length") != "260000" || !strings.Contains(hdr.Get("ETag"), d) {
		t.Fatalf("HEAD = %d %v, want 200 with the length and digest", code, hdr)
	}
	if code, _, body := do(t, c, http.MethodGet, url, nil, nil); code != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("GET = %d, %d bytes; want 200 and the %d uploaded", code, len(body), len(data))
	}
	if code, _, body := do(t, c, http.MethodGet, url, nil, map[string]string{"Range": "bytes=100000-"}); code != http.StatusPartialContent || !bytes.Equal(body, data[100000:]) {
		t.Fatalf("GET of a range = %d, %d bytes; want 206 and the rest", code, len(body))
	}

	for _, tt := range []struct {
		name, path string
		code       int
		reason     string
	}{
		{"upper case", ArtifactsPath + strings.ToUpper(d), http.StatusBadRequest, "BadRequest"},
		{"short", ArtifactsPath + d[:10], http.StatusBadRequest, "BadRequest"},
		{"escape", ArtifactsPath + "..%2F..%2Fpki%2Fca.key", http.StatusBadRequest, "BadRequest"},
		{"other algorithm", "/firmware/v1/artifacts/md5/" + d[:32], http.StatusNotFound, "NotFound"},
	} {
		code, _, body := do(t, c, http.MethodGet, server+tt.path, nil, nil)
		if code != tt.code {
			t.Errorf("%s: GET %s = %d %s, want %d", tt.name, tt.path, code, body, tt.code)
			continue
		}
		wantStatus(t, body, tt.code, tt.reason)
	}

	big := bytes.Repeat([]byte{7}, 1<<20+1)
	code, _, body = do(t, c, http.MethodPut, server+ArtifactsPath+sha(big), big, nil)
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("PUT over the limit = %d %s, want 413", code, body)
	}
	wantStatus(t, body, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge")

	// A body of unknown length (chunked) is refused before it is read.
	small := []byte("small")
	req, err := http.NewRequest(http.MethodPut, server+ArtifactsPath+sha(small), io.MultiReader(bytes.NewReader(small)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusLengthRequired {
		t.Fatalf("chunked PUT = %d, want 411", resp.StatusCode)
	}

	// alice has no rights: 403 for both. bob may get the artifacts.
	cs, err := kubernetes.NewForConfig(adminConfig(t, h))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "artifact-reader"},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/firmware/v1/artifacts/*"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "artifact-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "artifact-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := map[string]string{"Impersonate-User": "alice"}
	for _, m := range []string{http.MethodGet, http.MethodPut} {
		code, _, body := do(t, c, m, url, data, alice)
		if code != http.StatusForbidden {
			t.Fatalf("%s as alice = %d %s, want 403", m, code, body)
		}
		wantStatus(t, body, http.StatusForbidden, "Forbidden")
	}
	bob := map[string]string{"Impersonate-User": "bob"}
	wait.For(t, 30*time.Second, "bob's role to take effect", func() (bool, string) {
		code, _, _ := do(t, c, http.MethodGet, url, nil, bob)
		return code == http.StatusOK, http.StatusText(code)
	})
	if code, _, body := do(t, c, http.MethodPut, server+ArtifactsPath+sha(small), small, bob); code != http.StatusForbidden {
		t.Fatalf("PUT as bob = %d %s, want 403", code, body)
	}
}

// TestFirmwareReleaseStatus: the hub installs the firmware CRDs at start
// and its release controller verifies a Release against the trust
// ConfigMap and finds its artifacts in the store; a trust set without the
// signer makes it unverified again.
func TestFirmwareReleaseStatus(t *testing.T) {
	h, _ := startHub(t, t.TempDir())
	c, server := adminClient(t, h.KubeconfigPath())
	cfg := adminConfig(t, h)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	pub, key, err := manifest.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("device firmware "), 1000)
	comp, err := manifest.BuildComponent("config", manifest.KindFile, "", "", "", bytes.NewReader(data), 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	m := &manifest.Manifest{Name: "gateway", Version: "1.4.0", Components: []manifest.Component{comp}, Created: now, Expires: now.Add(time.Hour)}
	envelope, err := manifest.Sign(m, key)
	if err != nil {
		t.Fatal(err)
	}
	rel := &firmwarev1.Release{
		TypeMeta:   metav1.TypeMeta{APIVersion: firmwarev1.SchemeGroupVersion.String(), Kind: "Release"},
		ObjectMeta: metav1.ObjectMeta{Name: "gateway-1.4.0"},
		Spec:       firmwarev1.ReleaseSpec{Version: "1.4.0", Envelope: envelope, Components: firmwarerelease.SpecComponents(m)},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(rel)
	if err != nil {
		t.Fatal(err)
	}
	releases := dc.Resource(firmwarerelease.ReleasesResource)
	wait.For(t, 60*time.Second, "the Release resource to be served", func() (bool, string) {
		_, err := releases.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		return err == nil, errString(err)
	})
	cond := func(typ string) (metav1.Condition, []string) {
		u, err := releases.Get(ctx, rel.Name, metav1.GetOptions{})
		if err != nil {
			return metav1.Condition{}, nil
		}
		var got firmwarev1.Release
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &got); err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Status.Conditions {
			if c.Type == typ {
				return c, got.Status.KeyIDs
			}
		}
		return metav1.Condition{}, got.Status.KeyIDs
	}
	waitCond := func(typ string, status metav1.ConditionStatus, reason string) {
		t.Helper()
		wait.For(t, 60*time.Second, typ+" "+string(status)+" "+reason, func() (bool, string) {
			c, _ := cond(typ)
			return c.Status == status && c.Reason == reason, c.Reason + ": " + c.Message
		})
	}
	waitCond(firmwarev1.ReleaseVerified, metav1.ConditionFalse, firmwarerelease.ReasonNoTrust)
	waitCond(firmwarev1.ReleaseArtifactsStored, metav1.ConditionFalse, firmwarerelease.ReasonMissing)

	tdata, err := trust.Data(manifest.Trust{Keys: []ed25519.PublicKey{pub}, Threshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: trust.Namespace, Name: trust.Name}, Data: tdata}
	if cm, err = cs.CoreV1().ConfigMaps(trust.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCond(firmwarev1.ReleaseVerified, metav1.ConditionTrue, firmwarerelease.ReasonVerified)
	if _, ids := cond(firmwarev1.ReleaseVerified); len(ids) != 1 || ids[0] != manifest.KeyID(pub) {
		t.Fatalf("keyIDs = %v, want [%s]", ids, manifest.KeyID(pub))
	}
	if code, _, body := do(t, c, http.MethodPut, server+ArtifactsPath+comp.SHA256, data, nil); code != http.StatusCreated {
		t.Fatalf("PUT = %d %s", code, body)
	}
	// The controller looks again for missing artifacts every 30 s.
	waitCond(firmwarev1.ReleaseArtifactsStored, metav1.ConditionTrue, firmwarerelease.ReasonStored)

	other, _, err := manifest.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data, err = trust.Data(manifest.Trust{Keys: []ed25519.PublicKey{other}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(trust.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCond(firmwarev1.ReleaseVerified, metav1.ConditionFalse, string(manifest.UnknownKey))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzParseArtifactPath: a path is accepted only with a digest the store
// takes, which names a file inside it and is the path's whole tail.
func FuzzParseArtifactPath(f *testing.F) {
	f.Add(ArtifactsPath + strings.Repeat("a", 64))
	f.Add(ArtifactsPath + "../../pki/ca.key")
	f.Add(ArtifactsPath + strings.Repeat("A", 64))
	f.Add("/firmware/v1/artifacts/sha256")
	f.Add(ArtifactsPath + strings.Repeat("0", 64) + "/x")
	f.Fuzz(func(t *testing.T, path string) {
		d, under, ok := parseArtifactPath(path)
		if ok != (d != "") || ok && !under {
			t.Fatalf("parseArtifactPath(%q) = %q, %v, %v", path, d, under, ok)
		}
		if !ok {
			return
		}
		if path != ArtifactsPath+d || len(d) != 64 || strings.ContainsAny(d, "/.\\") || strings.ToLower(d) != d {
			t.Fatalf("parseArtifactPath(%q) accepted %q", path, d)
		}
	})
}
