package netem

import (
	"net"
	"testing"
	"time"
)

// echo serves a UDP echo on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			c.WriteToUDP(buf[:n], from)
		}
	}()
	return c.LocalAddr().String()
}

func TestRelay(t *testing.T) {
	r, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("udp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip := func(msg string) bool {
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		return err == nil && string(buf[:n]) == msg
	}
	if !roundTrip("hello") {
		t.Fatal("no echo through an open relay")
	}
	if up, down := r.Bytes(); up != 5 || down != 5 {
		t.Errorf("Bytes() = %d, %d; want 5, 5", up, down)
	}
	r.Set(Conditions{Blackhole: true})
	if roundTrip("lost") {
		t.Fatal("echo through a black hole")
	}
	if r.Dropped() == 0 {
		t.Error("Dropped() = 0 after a black hole")
	}
	r.Set(Conditions{Delay: 50 * time.Millisecond})
	start := time.Now()
	if !roundTrip("slow") {
		t.Fatal("no echo through a delaying relay")
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("round trip took %v, want at least 100ms with 50ms each way", d)
	}
}
