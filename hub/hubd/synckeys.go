package hubd

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/internal/atomicfile"
)

// syncKeysFile holds the sync endpoint's QUIC stateless-reset key and TLS
// session-ticket key. Kept across restarts they let nodes learn at once
// that a restarted hub lost their connections (a stateless reset instead
// of waiting out the idle timeout) and resume their TLS sessions.
const syncKeysFile = "sync.keys"

// syncKeys are the keys of syncKeysFile.
type syncKeys struct {
	reset  quic.StatelessResetKey
	ticket [32]byte
}

// loadSyncKeys reads the keys at path, creating them on first start.
func loadSyncKeys(path string) (*syncKeys, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		b = make([]byte, 64)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("generate sync keys: %w", err)
		}
		if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
			return nil, fmt.Errorf("write sync keys: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("read sync keys: %w", err)
	case len(b) != 64:
		return nil, fmt.Errorf("%s holds %d bytes, want 64: remove it to make new keys (nodes reconnect with a full handshake)", path, len(b))
	}
	k := &syncKeys{}
	copy(k.reset[:], b[:32])
	copy(k.ticket[:], b[32:])
	return k, nil
}
