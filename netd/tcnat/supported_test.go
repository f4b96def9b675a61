package tcnat

import (
	"os"
	"testing"
)

func TestSupported(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if err := Supported(); err != nil {
		t.Fatal(err)
	}
}
