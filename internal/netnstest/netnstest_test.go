package netnstest

import (
	"net"
	"testing"
)

// TestEnter: inside, the only link is the loopback, up, and nothing
// outside answers.
func TestEnter(t *testing.T) {
	if !Enter(t) {
		return
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 1 || ifs[0].Flags&net.FlagLoopback == 0 || ifs[0].Flags&net.FlagUp == 0 {
		t.Fatalf("interfaces %v, want the loopback alone, up", ifs)
	}
	if _, err := net.Dial("udp", "192.0.2.1:9"); err == nil {
		t.Fatal("a route out of the namespace exists")
	}
}
