package wire

import (
	"strings"
	"testing"
)

func TestValidTimeZone(t *testing.T) {
	for _, name := range []string{"UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+3", "Etc/GMT-14", "America/Port-au-Prince"} {
		if err := ValidTimeZone(name); err != nil {
			t.Errorf("ValidTimeZone(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", "/etc/localtime", "Europe/", "Europe//Berlin", "../../etc/passwd", "Europe/Berlin now", "Europe/Berlin\n", strings.Repeat("A", MaxTimeZoneLen+1)} {
		if err := ValidTimeZone(name); err == nil {
			t.Errorf("ValidTimeZone(%q) = nil, want an error", name)
		}
	}
}
