package agent

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// LocalTimeZone returns the IANA name of the zone this machine's clock is
// set to, for Config.TimeZone: the TZ environment variable's, else what
// /etc/localtime links to under a zoneinfo directory, else
// /etc/timezone's (Debian's); "" when none of them names a zone.
func LocalTimeZone() string {
	return localTimeZone(os.Getenv("TZ"), "/etc/localtime", "/etc/timezone")
}

func localTimeZone(tz, localtime, timezone string) string {
	// TZ=":Europe/Berlin" and TZ="Europe/Berlin" name a zone; a TZ that
	// is a path or a POSIX rule ("CET-1CEST") does not name one, and is
	// passed over.
	if name := strings.TrimPrefix(tz, ":"); name == "UTC" || (strings.Contains(name, "/") && wire.ValidTimeZone(name) == nil) {
		return name
	}
	if target, err := os.Readlink(localtime); err == nil {
		if i := strings.LastIndex(target, "zoneinfo/"); i >= 0 {
			name := filepath.Clean(target[i+len("zoneinfo/"):])
			name = strings.TrimPrefix(strings.TrimPrefix(name, "posix/"), "right/")
			if wire.ValidTimeZone(name) == nil {
				return name
			}
		}
	}
	if b, err := readLimited(timezone); err == nil {
		if name := strings.TrimSpace(string(b)); wire.ValidTimeZone(name) == nil {
			return name
		}
	}
	return ""
}
