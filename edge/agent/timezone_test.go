package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLocalTimeZone(t *testing.T) {
	dir := t.TempDir()
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	berlin := link("berlin", "/usr/share/zoneinfo/Europe/Berlin")
	posix := link("posix", "../usr/share/zoneinfo/posix/America/New_York")
	copied := file("copied", "TZif2...") // a copy, not a link: no name
	debian := file("timezone", "Asia/Tokyo\n")
	garbage := file("garbage", "not a zone; rm -rf /\n")
	missing := filepath.Join(dir, "missing")

	for _, c := range []struct {
		tz, localtime, timezone string
		want                    string
	}{
		{":Europe/Lisbon", berlin, debian, "Europe/Lisbon"},
		{"America/Sao_Paulo", berlin, debian, "America/Sao_Paulo"},
		{"UTC", berlin, debian, "UTC"},
		{"CET-1CEST", berlin, debian, "Europe/Berlin"},
		{"/usr/share/zoneinfo/Europe/Paris", berlin, debian, "Europe/Berlin"},
		{"", berlin, debian, "Europe/Berlin"},
		{"", posix, debian, "America/New_York"},
		{"", copied, debian, "Asia/Tokyo"},
		{"", missing, debian, "Asia/Tokyo"},
		{"", copied, garbage, ""},
		{"", missing, missing, ""},
	} {
		if got := localTimeZone(c.tz, c.localtime, c.timezone); got != c.want {
			t.Errorf("localTimeZone(%q, %s, %s) = %q, want %q", c.tz, filepath.Base(c.localtime), filepath.Base(c.timezone), got, c.want)
		}
	}
}
