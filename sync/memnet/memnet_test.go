package memnet_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/sync/memnet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitLong = 10 * time.Second

func listen(t *testing.T, n *memnet.Network, addr string) *memnet.Conn {
	t.Helper()
	c, err := n.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(waitLong)) // no read hangs a test
	return c
}

// read reads one packet and fails the test on an error.
func read(t *testing.T, c *memnet.Conn) (string, net.Addr) {
	t.Helper()
	buf := make([]byte, 100)
	n, from, err := c.ReadFrom(buf)
	if err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
	return string(buf[:n]), from
}

func send(t *testing.T, c *memnet.Conn, to net.Addr, s string) {
	t.Helper()
	if n, err := c.WriteTo([]byte(s), to); err != nil || n != len(s) {
		t.Fatalf("WriteTo = %d, %v; want %d, nil", n, err, len(s))
	}
}

func TestListen(t *testing.T) {
	n := memnet.New()
	a := listen(t, n, "10.0.0.1:0")
	b := listen(t, n, "10.0.0.1:0")
	if a.LocalAddr().String() != "10.0.0.1:1" || b.LocalAddr().String() != "10.0.0.1:2" {
		t.Errorf("ports %v and %v, want 10.0.0.1:1 and 10.0.0.1:2", a.LocalAddr(), b.LocalAddr())
	}
	if _, ok := a.LocalAddr().(*net.UDPAddr); !ok {
		t.Errorf("LocalAddr is a %T, want a *net.UDPAddr", a.LocalAddr())
	}
	if _, err := n.Listen("10.0.0.1:2"); err == nil {
		t.Error("Listen on an address in use succeeded")
	}
	if _, err := n.Listen("nowhere"); err == nil {
		t.Error("Listen on a malformed address succeeded")
	}
	b.Close()
	c := listen(t, n, "10.0.0.1:2")
	if c.LocalAddr().String() != "10.0.0.1:2" {
		t.Errorf("Listen after Close at %v, want 10.0.0.1:2", c.LocalAddr())
	}
}

// TestCutAndHeal: a cut host neither sends nor receives; healed, it does
// both again.
func TestCutAndHeal(t *testing.T) {
	n := memnet.New()
	hub := listen(t, n, "127.0.0.1:443")
	node := listen(t, n, "10.0.0.2:0")
	other := listen(t, n, "10.0.0.3:0")

	send(t, node, hub.LocalAddr(), "hello")
	if got, from := read(t, hub); got != "hello" || from.String() != node.LocalAddr().String() {
		t.Fatalf("hub read %q from %v, want %q from %v", got, from, "hello", node.LocalAddr())
	}

	n.Cut("10.0.0.2")
	send(t, node, hub.LocalAddr(), "lost on the way up")
	send(t, hub, node.LocalAddr(), "lost on the way down")
	send(t, other, hub.LocalAddr(), "the others still reach the hub")
	if got, _ := read(t, hub); got != "the others still reach the hub" {
		t.Fatalf("hub read %q while the node was cut", got)
	}
	if got := n.Dropped(); got != 2 {
		t.Errorf("Dropped = %d, want 2", got)
	}

	n.Heal("10.0.0.2")
	send(t, hub, node.LocalAddr(), "back")
	if got, _ := read(t, node); got != "back" {
		t.Fatalf("node read %q after the heal, want %q", got, "back")
	}
	// Nothing sent during the cut arrived late.
	node.SetReadDeadline(time.Now())
	if _, _, err := node.ReadFrom(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("node's queue after the heal: %v, want it empty", err)
	}
	if got := n.Delivered(); got != 3 {
		t.Errorf("Delivered = %d, want 3", got)
	}
}

// TestDeadlineAndClose: a blocked ReadFrom returns when the deadline
// moves to the past or the connection closes, with the errors quic-go
// expects of a socket.
func TestDeadlineAndClose(t *testing.T) {
	n := memnet.New()
	c, err := n.Listen("10.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	readErr := func() error {
		t.Helper()
		select {
		case err := <-errs:
			return err
		case <-time.After(waitLong):
			t.Fatal("ReadFrom still blocked")
			return nil
		}
	}
	go func() { _, _, err := c.ReadFrom(make([]byte, 10)); errs <- err }()
	c.SetReadDeadline(time.Now())
	err = readErr()
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("ReadFrom after the deadline = %v, want a timeout", err)
	}

	c.SetReadDeadline(time.Time{})
	go func() { _, _, err := c.ReadFrom(make([]byte, 10)); errs <- err }()
	c.Close()
	if err := readErr(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadFrom after Close = %v, want net.ErrClosed", err)
	}
	if _, err := c.WriteTo([]byte("x"), c.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteTo after Close = %v, want net.ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestDelay(t *testing.T) {
	n := memnet.New()
	a := listen(t, n, "10.0.0.1:0")
	b := listen(t, n, "10.0.0.2:0")
	const delay = 50 * time.Millisecond
	n.SetDelay(delay)
	start := time.Now()
	send(t, a, b.LocalAddr(), "late")
	if got, _ := read(t, b); got != "late" {
		t.Fatalf("read %q", got)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("a packet delayed by %v arrived after %v", delay, took)
	}
}

// TestQUIC: quic-go runs over the network; a cut link goes silent until
// QUIC's idle timeout ends the connection, and after the heal a new
// connection gets through.
func TestQUIC(t *testing.T) {
	n := memnet.New()
	ca := testca.New(t)
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.Serving(t)}, NextProtos: []string{"test"}}
	clientTLS := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", NextProtos: []string{"test"}}
	qconf := &quic.Config{MaxIdleTimeout: 500 * time.Millisecond}

	spc := listen(t, n, "127.0.0.1:443")
	spc.SetReadDeadline(time.Time{})
	str := &quic.Transport{Conn: spc}
	defer str.Close()
	ln, err := str.Listen(serverTLS, qconf)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	served := make(chan struct{})
	go func() {
		// Echo every stream of every connection.
		defer close(served)
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			go func() {
				for {
					st, err := conn.AcceptStream(ctx)
					if err != nil {
						return
					}
					io.Copy(st, st)
					st.Close()
				}
			}()
		}
	}()
	defer func() { ln.Close(); <-served }()

	cpc := listen(t, n, "10.0.0.2:0")
	cpc.SetReadDeadline(time.Time{})
	ctr := &quic.Transport{Conn: cpc}
	defer ctr.Close()
	echo := func(conn *quic.Conn) error {
		st, err := conn.OpenStreamSync(ctx)
		if err != nil {
			return err
		}
		st.Write([]byte("ping"))
		st.Close()
		got, err := io.ReadAll(st)
		if err != nil {
			return err
		}
		if string(got) != "ping" {
			t.Errorf("echo %q, want ping", got)
		}
		return nil
	}
	conn, err := ctr.Dial(ctx, spc.LocalAddr(), clientTLS, qconf)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if err := echo(conn); err != nil {
		t.Fatalf("echo: %v", err)
	}

	n.Cut("10.0.0.2")
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
		t.Fatal("the connection outlived its idle timeout on a cut link")
	}
	var idle *quic.IdleTimeoutError
	if err := context.Cause(conn.Context()); !errors.As(err, &idle) {
		t.Errorf("connection ended with %v, want an idle timeout", err)
	}

	n.Heal("10.0.0.2")
	conn, err = ctr.Dial(ctx, spc.LocalAddr(), clientTLS, qconf)
	if err != nil {
		t.Fatalf("dial after the heal: %v", err)
	}
	defer conn.CloseWithError(0, "")
	if err := echo(conn); err != nil {
		t.Fatalf("echo after the heal: %v", err)
	}
}
