package childhub

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/client-go/rest"
)

func TestParseProc(t *testing.T) {
	status := []byte("Name:\toutpost\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nRssAnon:\t   81920 kB\nRssFile:\t   20480 kB\nThreads:\t12\n")
	want := Sample{RSS: 100 << 20, HWM: 200 << 20, RSSAnon: 80 << 20, RSSFile: 20 << 20}
	if got, err := parseStatus(status); err != nil || got != want {
		t.Errorf("parseStatus = %+v, %v; want %+v", got, err, want)
	}
	// Kernels before 4.5 have no RssAnon or RssFile.
	old := []byte("VmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n")
	if got, err := parseStatus(old); err != nil || got != (Sample{RSS: 1 << 20, HWM: 2 << 20}) {
		t.Errorf("parseStatus(no RssAnon) = %+v, %v", got, err)
	}
	if _, err := parseStatus([]byte("Name:\tx\n")); err == nil {
		t.Errorf("parseStatus without VmRSS = nil error")
	}
	// A command name with spaces and parentheses; utime 250, stime 50.
	stat := []byte("4242 (out post) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000 200")
	if cpu, err := parseStatCPU(stat); err != nil || cpu != 3 {
		t.Errorf("parseStatCPU = %v, %v; want 3", cpu, err)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1")); err == nil {
		t.Errorf("parseStatCPU of a short line = nil error")
	}
	if _, err := ReadProc("self"); runtime.GOOS == "linux" && err != nil {
		t.Errorf("ReadProc(self) = %v", err)
	}
}

func TestExportLine(t *testing.T) {
	e := &exportLine{found: make(chan struct{})}
	for _, chunk := range []string{"some log\nexport KUBE", "CONFIG=/tmp/h/admin.kube", "config\nmore\n"} {
		e.Write([]byte(chunk))
	}
	select {
	case <-e.found:
	default:
		t.Fatal("export line not found")
	}
	if got := e.path(); got != "/tmp/h/admin.kubeconfig" {
		t.Errorf("path() = %q", got)
	}
}

func TestResetPeak(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("clear_refs is Linux's")
	}
	// Raise this process's peak well above its RSS, then reset it.
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	before, err := ReadProc("self")
	if err != nil {
		t.Fatal(err)
	}
	b = nil
	runtime.GC()
	debug.FreeOSMemory()
	if err := ResetPeak("self"); err != nil {
		t.Skipf("ResetPeak: %v (kernel without clear_refs peak reset?)", err)
	}
	after, err := ReadProc("self")
	if err != nil {
		t.Fatal(err)
	}
	if after.HWM >= before.HWM {
		t.Errorf("HWM after ResetPeak = %d, want under %d, the peak before", after.HWM, before.HWM)
	}
	runtime.KeepAlive(b)
}

func TestSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// RSS falls by 10 MB a step for three steps, then holds: Settle
		// returns five steps after the last new low.
		rss := []uint64{100e6, 90e6, 80e6, 70e6}
		calls := 0
		read := func() (Sample, error) {
			s := Sample{RSS: rss[min(calls, len(rss)-1)]}
			calls++
			return s, nil
		}
		first, _ := read()
		got, waited, err := Settle(t.Context(), read, first, time.Minute)
		if err != nil || got.RSS != 70e6 || waited != 8*time.Second {
			t.Errorf("Settle = %d, %v, %v; want 70 MB after 8s", got.RSS, waited, err)
		}
		// A limit shorter than five steps ends it.
		calls = 0
		first, _ = read()
		if _, waited, _ := Settle(t.Context(), read, first, 2*time.Second); waited != 2*time.Second {
			t.Errorf("Settle with a 2s limit waited %v", waited)
		}
	})
}

func TestDirSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]int{"x": 10_000, "a/y": 5_000} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	disk, apparent, err := DirSize(dir)
	if err != nil || apparent != 15_000 || disk == 0 {
		t.Errorf("DirSize = %d, %d, %v; want 15,000 bytes apparent and some on disk", disk, apparent, err)
	}
	if _, _, err := DirSize(filepath.Join(dir, "missing")); err == nil {
		t.Error("DirSize of a missing dir = nil error")
	}
}

func TestHeapProfiler(t *testing.T) {
	var nilProf *HeapProfiler
	if err := nilProf.Write(t.Context(), "x", true); err != nil {
		t.Errorf("nil HeapProfiler.Write = %v", err)
	}
	var (
		mu      sync.Mutex // guards queries, which the handler appends to
		queries []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/heap" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		io.WriteString(w, "profile "+r.URL.RawQuery)
	}))
	defer srv.Close()
	dir := t.TempDir()
	p, err := NewHeapProfiler(dir, &rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, gc := range []bool{false, true} {
		mu.Lock()
		queries = nil
		mu.Unlock()
		if err := p.Write(t.Context(), "phase", gc); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := queries
		mu.Unlock()
		want := []string{""}
		if gc {
			want = []string{"gc=1", "gc=1"} // the first to sweep what the second counts
		}
		if !slices.Equal(got, want) {
			t.Errorf("Write(gc=%v) asked %q, want %q", gc, got, want)
		}
		b, err := os.ReadFile(filepath.Join(dir, "hub.heap.phase.pprof"))
		if err != nil || string(b) != "profile "+want[0] {
			t.Errorf("Write(gc=%v) wrote %q, %v", gc, b, err)
		}
	}
	if p, err := NewHeapProfiler("", &rest.Config{Host: srv.URL}); p != nil || err != nil {
		t.Errorf("NewHeapProfiler(\"\") = %v, %v; want nil, nil", p, err)
	}
}
