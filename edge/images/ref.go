package images

import (
	"errors"
	"fmt"
	"net"
	"strings"

	distref "github.com/distribution/reference"
)

// ErrInvalidImageName is returned, wrapped with runtime.ErrImagePull, by
// Pull for a reference that is not an image name (kubelet's
// InvalidImageName).
var ErrInvalidImageName = errors.New("invalid image name")

// Normalize returns ref in the form containerd stores images under, as
// Docker reads references: the registry and, on Docker Hub, "library/"
// added, ":latest" when there is neither tag nor digest, and the tag
// dropped when there is a digest. "busybox" is
// "docker.io/library/busybox:latest".
func Normalize(ref string) (string, error) {
	named, err := distref.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidImageName, ref, err)
	}
	return named.String(), nil
}

// splitRef returns the registry host (lowercased, without port), port
// and repository path of a normalized reference.
func splitRef(name string) (host, port, repo string, err error) {
	named, err := distref.ParseNormalizedNamed(name)
	if err != nil {
		return "", "", "", err
	}
	host, port = splitHostPort(distref.Domain(named))
	return host, port, distref.Path(named), nil
}

// splitHostPort splits "host:port", "[v6]:port" or "host" and lowercases
// the host.
func splitHostPort(hp string) (host, port string) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		return strings.ToLower(h), p
	}
	return strings.ToLower(strings.Trim(hp, "[]")), ""
}

// dockerHubAliases are the names Docker Hub goes by in credentials.
var dockerHubAliases = map[string]bool{
	"docker.io": true, "index.docker.io": true, "registry-1.docker.io": true, "registry.hub.docker.com": true,
}
