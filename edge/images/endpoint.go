package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
	"github.com/outpost-mesh/outpost/internal/limitread"
)

// Endpoint is where the agent's containerd is, as the agent writes it in
// its data directory for `outpost image`, which is given only that.
type Endpoint struct {
	Address   string `json:"address"`   // containerd's gRPC socket; required
	Namespace string `json:"namespace"` // of the agent's images; required
	// Snapshotter is what the agent unpacks images into; "" for
	// overlayfs.
	Snapshotter string `json:"snapshotter,omitempty"`
}

// maxEndpointSize bounds the endpoint file ReadEndpoint reads.
const maxEndpointSize = 64 << 10

// ErrNoEndpoint is returned, wrapped, by ReadEndpoint when the data
// directory holds no endpoint file.
var ErrNoEndpoint = errors.New("no containerd endpoint")

// EndpointPath returns where the endpoint file of the agent whose data
// directory is dataDir is.
func EndpointPath(dataDir string) string {
	return filepath.Join(dataDir, "runtime", "containerd.json")
}

// WriteEndpoint writes e to dataDir's endpoint file, atomically,
// creating its directory as needed.
func WriteEndpoint(dataDir string, e Endpoint) error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("write containerd endpoint: %w", err)
	}
	file := EndpointPath(dataDir)
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("write containerd endpoint: %w", err)
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(file, append(b, '\n'), 0o600)
}

// ReadEndpoint reads dataDir's endpoint file. An absent file is an error
// wrapping ErrNoEndpoint that says what to do.
func ReadEndpoint(dataDir string) (Endpoint, error) {
	file := EndpointPath(dataDir)
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return Endpoint{}, fmt.Errorf("%w in %s: the edge agent has not run with containerd in data directory %s; start it (outpost edge --data-dir %s) or give the right --data-dir",
			ErrNoEndpoint, file, dataDir, dataDir)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("read containerd endpoint: %w", err)
	}
	defer f.Close()
	b, err := limitread.All(f, maxEndpointSize)
	if err != nil {
		return Endpoint{}, fmt.Errorf("read containerd endpoint %s: %w", file, err)
	}
	e, err := decodeEndpoint(b)
	if err != nil {
		return Endpoint{}, fmt.Errorf("read containerd endpoint %s: %w", file, err)
	}
	return e, nil
}

func decodeEndpoint(b []byte) (Endpoint, error) {
	if len(b) > maxEndpointSize {
		return Endpoint{}, fmt.Errorf("more than %d bytes", maxEndpointSize)
	}
	var e Endpoint
	if err := json.Unmarshal(b, &e); err != nil {
		return Endpoint{}, err
	}
	return e, e.validate()
}

func (e Endpoint) validate() error {
	switch {
	case e.Address == "":
		return errors.New("no address")
	case e.Namespace == "":
		return errors.New("no namespace")
	}
	return nil
}
