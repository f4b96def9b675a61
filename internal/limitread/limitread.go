// Package limitread reads files and streams whole, up to a size limit, for
// decoders of disk and network input that must not allocate without
// bound.
package limitread

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is wrapped by the errors of All and File for input longer
// than the limit.
var ErrTooLarge = errors.New("too large")

// All reads r to its end. Past limit bytes it stops and returns an error
// wrapping ErrTooLarge; it never holds more than limit+1 bytes.
func All(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
	}
	return b, nil
}

// File reads the file at path as All does. Its errors name the file.
func File(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := All(f, limit)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
