package store

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	// MaxValueSize is the largest value a write accepts: the size of etcd's
	// default request limit, which Kubernetes objects are sized for. That
	// limit covers the whole request, so an etcd backing the hub needs
	// --max-request-bytes of about 2 MiB to take values of this size.
	MaxValueSize = 3 << 19 // 1.5 MiB
	// MaxKeySize is the longest key accepted.
	MaxKeySize = 1024
)

// ValidateKey checks a key: it starts with "/", does not end with "/", has
// no empty segment, is valid UTF-8 of at most MaxKeySize bytes and holds no
// control characters. Errors match ErrInvalidKey.
func ValidateKey(key string) error {
	if err := validatePath(key); err != nil {
		return err
	}
	if strings.HasSuffix(key, "/") {
		return fmt.Errorf("%w %q: must not end with /", ErrInvalidKey, key)
	}
	return nil
}

// ValidatePrefix checks a list or watch prefix: like a key, but it must end
// with "/" so that "/a/b/" never matches "/a/bc". Errors match ErrInvalidKey.
func ValidatePrefix(prefix string) error {
	if err := validatePath(prefix); err != nil {
		return err
	}
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("%w %q: a prefix must end with /", ErrInvalidKey, prefix)
	}
	return nil
}

// ValidateValue checks a value's size. Errors match ErrValueTooLarge.
func ValidateValue(value []byte) error {
	if len(value) > MaxValueSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(value), MaxValueSize)
	}
	return nil
}

// ValidateRevision checks that rev is not negative. Errors match
// ErrInvalidArgument.
func ValidateRevision(rev int64) error {
	if rev < 0 {
		return fmt.Errorf("%w: negative revision %d", ErrInvalidArgument, rev)
	}
	return nil
}

// ValidateListOptions checks opts for a list of prefix.
func ValidateListOptions(prefix string, opts ListOptions) error {
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	if err := ValidateRevision(opts.Revision); err != nil {
		return err
	}
	if opts.Limit < 0 {
		return fmt.Errorf("%w: negative limit %d", ErrInvalidArgument, opts.Limit)
	}
	if opts.Continue != "" && !strings.HasPrefix(opts.Continue, prefix) {
		return fmt.Errorf("%w: continue key %q is outside prefix %q", ErrInvalidArgument, opts.Continue, prefix)
	}
	return nil
}

func validatePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(p) > MaxKeySize:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidKey, len(p), MaxKeySize)
	case p[0] != '/':
		return fmt.Errorf("%w %q: must start with /", ErrInvalidKey, p)
	case !utf8.ValidString(p):
		return fmt.Errorf("%w %q: not valid UTF-8", ErrInvalidKey, p)
	case strings.Contains(p, "//"):
		return fmt.Errorf("%w %q: empty path segment", ErrInvalidKey, p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w %q: control character %U", ErrInvalidKey, p, r)
		}
	}
	return nil
}
