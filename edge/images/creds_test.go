package images

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestParseDockerConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []runtime.Credential
		err  bool
	}{
		{"dockerconfigjson", `{"auths": {"registry.example.com:5000": {"username": "u", "password": "p"}}}`,
			[]runtime.Credential{{Registry: "registry.example.com:5000", Username: "u", Password: "p"}}, false},
		{"auth overrides", `{"auths": {"r.io": {"username": "x", "password": "y", "auth": "` + b64("u:p:with:colons") + `"}}}`,
			[]runtime.Credential{{Registry: "r.io", Username: "u", Password: "p:with:colons"}}, false},
		{"identity token", `{"auths": {"r.io": {"identitytoken": "tok"}}}`,
			[]runtime.Credential{{Registry: "r.io", IdentityToken: "tok"}}, false},
		{"docker hub key", `{"auths": {"https://index.docker.io/v1/": {"auth": "` + b64("u:p") + `"}}}`,
			[]runtime.Credential{{Registry: "docker.io", Username: "u", Password: "p"}}, false},
		{"scheme and path", `{"auths": {"https://Quay.io/team/": {"username": "u", "password": "p"}, "http://r.io:5000/v2/": {"username": "a", "password": "b"}}}`,
			[]runtime.Credential{{Registry: "quay.io/team", Username: "u", Password: "p"}, {Registry: "r.io:5000", Username: "a", Password: "b"}}, false},
		{"dockercfg", `{"r.io": {"auth": "` + b64("u:p") + `", "email": "e@x"}, "q.io": {"username": "a", "password": "b"}}`,
			[]runtime.Credential{{Registry: "q.io", Username: "a", Password: "b"}, {Registry: "r.io", Username: "u", Password: "p"}}, false},
		{"other docker cli keys", `{"auths": {"r.io": {"username": "u", "password": "p"}}, "credsStore": "desktop", "HttpHeaders": {"X": "y"}}`,
			[]runtime.Credential{{Registry: "r.io", Username: "u", Password: "p"}}, false},
		{"empty entries left out", `{"auths": {"r.io": {}, "q.io": null, "": {"username": "u", "password": "p"}}}`, nil, false},
		{"wildcard", `{"auths": {"*.example.com": {"username": "u", "password": "p"}}}`,
			[]runtime.Credential{{Registry: "*.example.com", Username: "u", Password: "p"}}, false},
		{"bad port left out", `{"auths": {"r.io:http": {"username": "u", "password": "p"}}}`, nil, false},
		{"empty auths", `{"auths": {}}`, nil, false},
		{"bad base64", `{"auths": {"r.io": {"auth": "!!!"}}}`, nil, true},
		{"auth without colon", `{"auths": {"r.io": {"auth": "` + b64("up") + `"}}}`, nil, true},
		{"not json", `{"auths": `, nil, true},
		{"not an object", `["r.io"]`, nil, true},
		{"auths not an object", `{"auths": "r.io"}`, nil, true},
		{"entry not an object", `{"auths": {"r.io": 1}}`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDockerConfig([]byte(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("ParseDockerConfig(%s) error %v, want error %v", tc.in, err, tc.err)
			}
			if err != nil {
				if !errors.Is(err, ErrDockerConfig) {
					t.Errorf("error %v is not ErrDockerConfig", err)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseDockerConfig(%s) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
	big := `{"auths": {"r.io": {"username": "` + strings.Repeat("u", MaxDockerConfigSize) + `"}}}`
	if _, err := ParseDockerConfig([]byte(big)); !errors.Is(err, ErrDockerConfig) {
		t.Errorf("ParseDockerConfig of %d bytes: %v, want ErrDockerConfig", len(big), err)
	}
}

func FuzzParseDockerConfig(f *testing.F) {
	f.Add([]byte(`{"auths": {"registry.example.com:5000": {"username": "u", "password": "p"}}}`))
	f.Add([]byte(`{"auths": {"https://index.docker.io/v1/": {"auth": "` + b64("u:p") + `"}}}`))
	f.Add([]byte(`{"r.io/team": {"auth": "` + b64("u:p") + `"}, "*.q.io:443": {"identitytoken": "t"}}`))
	f.Add([]byte(`{"auths": {"[::1]:5000": {"username": "u"}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		creds, err := ParseDockerConfig(b)
		if err != nil {
			return
		}
		for _, c := range creds {
			k, ok := parseCredKey(c.Registry)
			if !ok || k.String() != c.Registry {
				t.Fatalf("credential registry %q does not read back (%q, %v)", c.Registry, k.String(), ok)
			}
			if c.Username == "" && c.Password == "" && c.IdentityToken == "" {
				t.Fatalf("credential without secret: %+v", c)
			}
		}
		if !slices.IsSortedFunc(creds, func(a, b runtime.Credential) int { return strings.Compare(a.Registry, b.Registry) }) {
			t.Fatalf("credentials not sorted: %+v", creds)
		}
	})
}

func TestMatchCredentials(t *testing.T) {
	creds := []runtime.Credential{
		{Registry: "registry.example.com", Username: "host"},
		{Registry: "registry.example.com/team", Username: "team"},
		{Registry: "registry.example.com/team/app", Username: "app"},
		{Registry: "*.example.com", Username: "glob"},
		{Registry: "registry.example.com:5000", Username: "port"},
		{Registry: "https://index.docker.io/v1/", Username: "hub"},
		{Registry: "docker.io/myorg", Username: "hub-org"},
		{Registry: "registry.example.com", Username: "host2"},
		{Registry: "[::1]:5000", Username: "v6"},
		{Registry: "not a registry/", Username: "bad"},
	}
	for _, tc := range []struct {
		image string
		want  []string
	}{
		{"registry.example.com/team/app:1", []string{"app", "team", "host", "host2", "glob"}},
		{"registry.example.com/team/other", []string{"team", "host", "host2", "glob"}},
		{"registry.example.com/teamb/app", []string{"host", "host2", "glob"}},
		{"REGISTRY.example.com/x", []string{"host", "host2", "glob"}}, // host names ignore case
		{"other.example.com/x", []string{"glob"}},
		{"a.b.example.com/x", nil}, // a glob matches one label
		{"registry.example.com:5000/x", []string{"port"}},
		{"registry.example.com:5001/x", nil},
		{"busybox", []string{"hub"}},
		{"docker.io/library/busybox:1", []string{"hub"}},
		{"myorg/app", []string{"hub-org", "hub"}},
		{"index.docker.io/myorg/app", []string{"hub-org", "hub"}},
		{"quay.io/x", nil},
		{"[::1]:5000/x", []string{"v6"}},
	} {
		name, err := Normalize(tc.image)
		var got []string
		if err == nil {
			for _, c := range matchCredentials(name, creds) {
				got = append(got, c.Username)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("matchCredentials(%q) = %v, want %v", tc.image, got, tc.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"busybox", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"myorg/app", "docker.io/myorg/app:latest"},
		{"docker.io/busybox", "docker.io/library/busybox:latest"},
		{"index.docker.io/library/busybox", "docker.io/library/busybox:latest"},
		{"registry.example.com:5000/team/app:v2", "registry.example.com:5000/team/app:v2"},
		{"localhost/app", "localhost/app:latest"},
		{"busybox:1@sha256:" + strings.Repeat("a", 64), "docker.io/library/busybox@sha256:" + strings.Repeat("a", 64)},
		{"outpost.dev/demo/busybox:1", "outpost.dev/demo/busybox:1"},
	} {
		got, err := Normalize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Normalize(%q) = %q, %v, want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "Busybox", "busy box", "r.io/app:", "app@sha256:abc", ":1"} {
		if got, err := Normalize(in); !errors.Is(err, ErrInvalidImageName) {
			t.Errorf("Normalize(%q) = %q, %v, want ErrInvalidImageName", in, got, err)
		}
	}
}

func TestRegistryMessage(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{"Tag":"x"}}]}`, "manifest unknown"},
		{`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]}`, "unauthorized: authentication required"},
		{`{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known to registry"},{"code":"DENIED"}]}`, "name unknown: repository name not known to registry; denied"},
		{`{"details":"incorrect username or password"}`, ""},
		{`<html>502</html>`, ""},
		{``, ""},
	} {
		if got := registryMessage([]byte(tc.body)); got != tc.want {
			t.Errorf("registryMessage(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}
