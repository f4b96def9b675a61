// Package bpftest holds the test helpers that the tests of netd's eBPF
// dataplanes (netd/ebpflb and netd/tcnat) share: a bpffs of a test's
// own, the kernel check, tables of frontends, and servers that say who
// they are. Network namespaces are internal/netnstest's. Only tests
// import it.
package bpftest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/netd/internal/bpfpin"
	"github.com/outpost-mesh/outpost/netd/services"
)

// NeedKernel skips t unless it runs as root and supported (a
// dataplane's Supported) says the kernel runs the dataplane; a probe
// that fails for another reason than ebpf.ErrNotSupported fails t.
func NeedKernel(t testing.TB, supported func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads eBPF programs, mounts bpffs")
	}
	if err := supported(); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.Skipf("kernel lacks what the dataplane needs: %v", err)
		}
		t.Fatal(err)
	}
}

// Mount mounts a bpffs of t's own and returns its directory; the mount
// goes when t ends, and with it whatever t left pinned.
func Mount(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bpf")
	if err := bpfpin.MountBPFFS(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount bpffs: %v", err)
		}
	})
	return dir
}

// Remover is a dataplane whose routing can be taken away.
type Remover interface {
	Remove(ctx context.Context) error
}

// Opened returns d, made by a New that returned err, and removes it when
// t ends; t fails at once on err. closed is the dataplane's ErrClosed: a
// test that removed d itself is not an error.
func Opened[D Remover](t testing.TB, d D, err, closed error) D {
	t.Helper()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Remove(context.Background()); err != nil && !errors.Is(err, closed) {
			t.Errorf("Remove: %v", err)
		}
	})
	return d
}

// Table returns the table of fs.
func Table(fs ...*services.Frontend) services.Table {
	t := services.Table{}
	for _, f := range fs {
		t[f.Key] = f
	}
	return t
}

// Sync syncs d to tab, failing t on error.
func Sync(t testing.TB, d services.Dataplane, tab services.Table) {
	t.Helper()
	if err := d.Sync(context.Background(), tab); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// ServeTCP accepts connections on ln until t ends: it writes greeting(c)
// to each connection c, then echoes what it reads.
func ServeTCP(t testing.TB, ln net.Listener, greeting func(c net.Conn) string) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				if _, err := io.WriteString(c, greeting(c)); err != nil {
					return
				}
				io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// ServeUDP answers each datagram that arrives on pc with answer(from),
// until t ends.
func ServeUDP(t testing.TB, pc net.PacketConn, answer func(from net.Addr) string) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(answer(from)), from)
		}
	})
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
}

// Echo checks that c, to a ServeTCP server, still carries data both
// ways.
func Echo(t testing.TB, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatalf("write on the established connection: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("echo on the established connection = %q, %v", line, err)
	}
}
