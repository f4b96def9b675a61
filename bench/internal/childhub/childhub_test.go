package childhub

import (
	"runtime"
	"testing"
)

func TestParseProc(t *testing.T) {
	status := []byte("Name:\toutpost\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t12\n")
	rss, hwm, err := parseStatus(status)
	if err != nil || rss != 100<<20 || hwm != 200<<20 {
		t.Errorf("parseStatus = %d, %d, %v; want %d, %d", rss, hwm, err, 100<<20, 200<<20)
	}
	if _, _, err := parseStatus([]byte("Name:\tx\n")); err == nil {
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
