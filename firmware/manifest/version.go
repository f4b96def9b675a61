package manifest

import (
	"cmp"
	"fmt"
	"strings"
)

// maxVersionLen bounds a version string; semver itself has no limit.
const maxVersionLen = 64

// version is a parsed semantic version MAJOR.MINOR.PATCH[-PRE]. Numeric parts
// are kept as digit strings without leading zeros, so they compare by length
// then lexically and never overflow.
type version struct {
	core [3]string
	pre  []string
}

// parseVersion parses a semantic version 2.0.0 without a leading "v" and
// without build metadata ("+..."), which semver says carries no precedence:
// two distinct version strings of equal precedence would let a release
// replace another of "the same" version.
func parseVersion(s string) (version, error) {
	var v version
	if s == "" || len(s) > maxVersionLen {
		return v, fmt.Errorf("version %q: want MAJOR.MINOR.PATCH[-PRERELEASE] of at most %d characters", s, maxVersionLen)
	}
	core, pre, hasPre := strings.Cut(s, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return v, fmt.Errorf("version %q: want MAJOR.MINOR.PATCH[-PRERELEASE]", s)
	}
	for i, p := range parts {
		if !isNumericID(p) {
			return v, fmt.Errorf("version %q: %q is not a number without leading zeros", s, p)
		}
		v.core[i] = p
	}
	if hasPre {
		v.pre = strings.Split(pre, ".")
		for _, id := range v.pre {
			if !isPrereleaseID(id) {
				return v, fmt.Errorf("version %q: bad pre-release identifier %q", s, id)
			}
		}
	}
	return v, nil
}

// isNumericID reports whether s is a non-empty run of digits without a
// leading zero (or "0" itself).
func isNumericID(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isPrereleaseID reports whether s is a valid pre-release identifier:
// [0-9A-Za-z-]+, and without a leading zero if all digits.
func isPrereleaseID(s string) bool {
	if s == "" {
		return false
	}
	digits := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-':
			digits = false
		default:
			return false
		}
	}
	return !digits || isNumericID(s)
}

// compareNumeric compares two numeric identifiers without leading zeros.
func compareNumeric(a, b string) int {
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// compare returns -1, 0 or +1 as v is lower than, equal to or higher than w
// in semver precedence.
func (v version) compare(w version) int {
	for i := range v.core {
		if c := compareNumeric(v.core[i], w.core[i]); c != 0 {
			return c
		}
	}
	switch {
	case len(v.pre) == 0 && len(w.pre) == 0:
		return 0
	case len(v.pre) == 0:
		return 1 // a release is higher than its pre-releases
	case len(w.pre) == 0:
		return -1
	}
	for i := 0; i < len(v.pre) && i < len(w.pre); i++ {
		if c := comparePrerelease(v.pre[i], w.pre[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(v.pre), len(w.pre))
}

// comparePrerelease compares two pre-release identifiers: numeric ones
// numerically and below alphanumeric ones, which compare in ASCII order.
func comparePrerelease(a, b string) int {
	an, bn := isNumericID(a), isNumericID(b)
	switch {
	case an && bn:
		return compareNumeric(a, b)
	case an:
		return -1
	case bn:
		return 1
	}
	return strings.Compare(a, b)
}

// CompareVersions returns -1, 0 or +1 as a is lower than, equal to or higher
// than b in semantic-version precedence ("1.4.0-rc.1" < "1.4.0" < "1.10.0").
// Both must be valid manifest versions: no leading "v", no build metadata.
func CompareVersions(a, b string) (int, error) {
	va, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	return va.compare(vb), nil
}
