package images

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

// MaxDockerConfigSize is the largest secret ParseDockerConfig reads: the
// API's limit on a Secret's data.
const MaxDockerConfigSize = 1 << 20

// ErrDockerConfig is returned, wrapped, by ParseDockerConfig for data
// that is not a docker config.
var ErrDockerConfig = errors.New("invalid docker config")

// dockerConfigEntry is one registry's entry of a docker config.
type dockerConfigEntry struct {
	Username      string `json:"username"`
	Password      string `json:"password"`
	Auth          string `json:"auth"` // base64("username:password"), overriding both
	IdentityToken string `json:"identitytoken"`
}

// ParseDockerConfig returns the credentials of a kubernetes.io/dockerconfigjson
// secret's .dockerconfigjson ({"auths": {"registry": {...}}}) or of a
// kubernetes.io/dockercfg secret's .dockercfg ({"registry": {...}}), each
// entry with username and password, base64 "auth", or identitytoken.
// Registries are given as Credential.Registry wants them: host[:port] and
// path, no scheme, Docker Hub as "docker.io"; entries whose key names no
// registry, and entries with no credential, are left out, as kubelet does.
// The credentials are sorted by registry. Data larger than
// MaxDockerConfigSize is refused.
func ParseDockerConfig(data []byte) ([]runtime.Credential, error) {
	if len(data) > MaxDockerConfigSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrDockerConfig, len(data), MaxDockerConfigSize)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDockerConfig, err)
	}
	auths := top
	if raw, ok := top["auths"]; ok {
		// .dockerconfigjson; its other keys (credHelpers, credsStore,
		// HttpHeaders) name programs and options of the docker CLI.
		auths = nil
		if err := json.Unmarshal(raw, &auths); err != nil {
			return nil, fmt.Errorf("%w: auths: %v", ErrDockerConfig, err)
		}
	}
	var out []runtime.Credential
	for key, raw := range auths {
		if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			continue
		}
		var e dockerConfigEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("%w: entry %q: %v", ErrDockerConfig, key, err)
		}
		if e.Auth != "" {
			b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(e.Auth))
			if err != nil {
				return nil, fmt.Errorf("%w: entry %q: auth is not base64: %v", ErrDockerConfig, key, err)
			}
			user, pass, ok := strings.Cut(string(b), ":")
			if !ok {
				return nil, fmt.Errorf("%w: entry %q: auth is not base64(username:password)", ErrDockerConfig, key)
			}
			e.Username, e.Password = user, pass
		}
		k, ok := parseCredKey(key)
		if !ok || e.Username == "" && e.Password == "" && e.IdentityToken == "" {
			continue
		}
		out = append(out, runtime.Credential{
			Registry: k.String(), Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken,
		})
	}
	slices.SortFunc(out, func(a, b runtime.Credential) int { return strings.Compare(a.Registry, b.Registry) })
	return out, nil
}

// credKey is a Credential's Registry as matching reads it.
type credKey struct {
	host string // lowercase; labels may be globs ("*.example.com")
	port string // "" for none
	path string // repository path prefix, without slashes at either end; "" for all
}

func (k credKey) String() string {
	s := k.host
	if strings.Contains(s, ":") {
		s = "[" + s + "]"
	}
	if k.port != "" {
		s += ":" + k.port
	}
	if k.path != "" {
		s += "/" + k.path
	}
	return s
}

// parseCredKey reads a registry as docker configs and Credential give
// it: "registry.example.com:5000", "https://index.docker.io/v1/",
// "quay.io/team". Docker Hub's names are read as docker.io; a path of only
// an API version (/v1, /v2) is read as none, as the docker CLI does.
func parseCredKey(s string) (credKey, bool) {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "://"); i >= 0 {
		s = s[i+3:]
	}
	hostport, p, _ := strings.Cut(s, "/")
	p = strings.Trim(p, "/")
	if p == "v1" || p == "v2" {
		p = ""
	}
	if strings.ContainsAny(p, "?#") || strings.Contains(p, "//") {
		return credKey{}, false
	}
	host, port := splitHostPort(hostport)
	if host == "" || strings.ContainsAny(host, "/@ ") {
		return credKey{}, false
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return credKey{}, false
		}
	}
	if dockerHubAliases[host] && port == "" {
		host = "docker.io"
	}
	for _, label := range strings.Split(host, ".") {
		if _, err := path.Match(label, ""); err != nil {
			return credKey{}, false
		}
	}
	return credKey{host: host, port: port, path: p}, true
}

// matches reports whether credentials for k are for the image on host,
// port and repo, as kubelet's credential provider matches: the same
// number of host labels, each matching the key's (globs allowed), the
// same port, and the key's path a prefix of the repository's (whole
// segments: "team" covers "team/app", not "teamb").
func (k credKey) matches(host, port, repo string) bool {
	if k.port != port {
		return false
	}
	kl, hl := strings.Split(k.host, "."), strings.Split(host, ".")
	if len(kl) != len(hl) {
		return false
	}
	for i := range kl {
		if ok, _ := path.Match(kl[i], hl[i]); !ok {
			return false
		}
	}
	return k.path == "" || repo == k.path || strings.HasPrefix(repo, k.path+"/")
}

// matchCredentials returns the credentials of creds that are for the
// image name (normalized), most specific first: longer paths before
// shorter ones, hosts without globs before hosts with, then in the order
// given. The result points into creds.
func matchCredentials(name string, creds []runtime.Credential) []*runtime.Credential {
	host, port, repo, err := splitRef(name)
	if err != nil {
		return nil
	}
	type match struct {
		c        *runtime.Credential
		segments int
		globs    int
	}
	var ms []match
	for i := range creds {
		k, ok := parseCredKey(creds[i].Registry)
		if !ok || !k.matches(host, port, repo) {
			continue
		}
		segs := 0
		if k.path != "" {
			segs = strings.Count(k.path, "/") + 1
		}
		ms = append(ms, match{&creds[i], segs, strings.Count(k.host, "*") + strings.Count(k.host, "?") + strings.Count(k.host, "[")})
	}
	slices.SortStableFunc(ms, func(a, b match) int {
		if a.segments != b.segments {
			return b.segments - a.segments
		}
		return a.globs - b.globs
	})
	out := make([]*runtime.Credential, len(ms))
	for i, m := range ms {
		out[i] = m.c
	}
	return out
}
