package eviction

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const meminfo = `MemTotal:       24683652 kB
MemFree:        17394944 kB
MemAvailable:   24068536 kB
Buffers:           73884 kB
Cached:          6491312 kB
Active(file):    2751076 kB
Inactive(file):  3805176 kB
HugePages_Total:       0
`

func TestParseMeminfo(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Meminfo
		err      string
	}{
		{"real", meminfo, Meminfo{Total: 24683652 << 10, Free: 17394944 << 10, InactiveFile: 3805176 << 10}, ""},
		{"no unit", "MemTotal: 100\nMemFree: 10\nInactive(file): 5\n", Meminfo{100, 10, 5}, ""},
		{"missing inactive", "MemTotal: 100 kB\nMemFree: 10 kB\n", Meminfo{}, "missing"},
		{"empty", "", Meminfo{}, "missing"},
		{"garbage number", "MemTotal: x kB\nMemFree: 1 kB\nInactive(file): 1 kB\n", Meminfo{}, "not a size"},
		{"negative", "MemTotal: -5 kB\nMemFree: 1 kB\nInactive(file): 1 kB\n", Meminfo{}, "not a size"},
		{"huge", "MemTotal: 99999999999999999 kB\nMemFree: 1 kB\nInactive(file): 1 kB\n", Meminfo{}, "not a size"},
	} {
		got, err := ParseMeminfo([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: ParseMeminfo error = %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: ParseMeminfo = %+v, %v, want %+v", tc.name, got, err, tc.want)
		}
	}
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte(meminfo))
	f.Add([]byte("MemTotal: 1\nMemFree: 2\nInactive(file): 3\n"))
	f.Add([]byte("MemTotal:\n\n kB kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeminfo(b)
		if err != nil {
			return
		}
		if m.Total <= 0 || m.Free < 0 || m.InactiveFile < 0 {
			t.Fatalf("ParseMeminfo(%q) = %+v", b, m)
		}
		o := MemoryObservation(m, 0, 0, false)
		if o.Capacity != m.Total {
			t.Fatalf("capacity %d, want MemTotal %d", o.Capacity, m.Total)
		}
	})
}

func TestMemoryObservation(t *testing.T) {
	m := Meminfo{Total: mi(1000), Free: mi(100), InactiveFile: mi(50)}
	for _, tc := range []struct {
		name        string
		limit, ws   int64
		fromSource  bool
		avail, capa int64
	}{
		{"machine", 0, 0, false, mi(150), mi(1000)},
		{"cgroup without limit", 0, mi(300), true, mi(700), mi(1000)},
		{"cgroup with limit", mi(500), mi(300), true, mi(200), mi(500)},
		{"limit above machine", mi(5000), mi(300), true, mi(700), mi(1000)},
	} {
		got := MemoryObservation(m, tc.limit, tc.ws, tc.fromSource)
		if got.Available != tc.avail || got.Capacity != tc.capa {
			t.Errorf("%s: MemoryObservation = %+v, want available %d of %d", tc.name, got, tc.avail, tc.capa)
		}
	}
}

func TestParseLoadavgTasks(t *testing.T) {
	for in, want := range map[string]int64{"0.42 0.57 1.32 1/93 17706\n": 93, "0.00 0.00 0.00 2/1000000 1": 1000000} {
		if got, err := ParseLoadavgTasks([]byte(in)); err != nil || got != want {
			t.Errorf("ParseLoadavgTasks(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1 2 3", "1 2 3 93 5", "1 2 3 1/x 5", "1 2 3 1/-4 5"} {
		if _, err := ParseLoadavgTasks([]byte(in)); err == nil {
			t.Errorf("ParseLoadavgTasks(%q) = nil error", in)
		}
	}
}

// fakeProc lays out the /proc files Read uses.
func fakeProc(t *testing.T, meminfo string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"meminfo":                meminfo,
		"loadavg":                "0.1 0.2 0.3 3/400 99\n",
		"sys/kernel/pid_max":     "32768\n",
		"sys/kernel/threads-max": "4000\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadFake(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ProcDir = fakeProc(t, "MemTotal: 1000 kB\nMemFree: 100 kB\nInactive(file): 20 kB\n")
	cfg.DataDir = t.TempDir()
	cfg.ImageFsDir = t.TempDir()
	now := time.Unix(1000, 0)
	r, err := Read(&cfg, now)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if r.Time != now || r.MemoryTotal != 1000<<10 {
		t.Errorf("Read = %+v", r)
	}
	if got := r.Signals[SignalMemoryAvailable]; got != (Observation{Available: 120 << 10, Capacity: 1000 << 10}) {
		t.Errorf("memory.available = %+v", got)
	}
	if got := r.Signals[SignalPIDAvailable]; got != (Observation{Available: 3600, Capacity: 4000}) {
		t.Errorf("pid.available = %+v, want 3600 of 4000 (threads-max the lower)", got)
	}
	if r.DedicatedImageFs {
		t.Error("two temp dirs on one file system read as a dedicated imagefs")
	}
	for _, s := range []Signal{SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalImageFsAvailable, SignalImageFsInodesFree} {
		if o, ok := r.Signals[s]; !ok || o.Capacity <= 0 || o.Available < 0 || o.Available > o.Capacity {
			t.Errorf("%s = %+v, %v", s, o, ok)
		}
	}

	cfg.DataDir = filepath.Join(cfg.DataDir, "missing")
	os.Remove(filepath.Join(cfg.ProcDir, "loadavg"))
	r, err = Read(&cfg, now)
	if err == nil || !strings.Contains(err.Error(), "nodefs") || !strings.Contains(err.Error(), "pids") {
		t.Errorf("Read with a missing data dir and loadavg: error %v, want nodefs and pids named", err)
	}
	if _, ok := r.Signals[SignalMemoryAvailable]; !ok {
		t.Error("memory reading lost to another's failure")
	}
	if _, ok := r.Signals[SignalNodeFsAvailable]; ok {
		t.Error("nodefs reading present for a missing dir")
	}
}

func TestReadMachine(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	start := time.Now()
	r, err := Read(&cfg, start)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	t.Logf("read in %v: %+v", time.Since(start), r)
	m := r.Signals[SignalMemoryAvailable]
	if m.Capacity <= 0 || m.Available <= 0 || m.Available > m.Capacity {
		t.Errorf("memory.available = %+v", m)
	}
	p := r.Signals[SignalPIDAvailable]
	if p.Capacity <= 0 || p.Available <= 0 || p.Available >= p.Capacity {
		t.Errorf("pid.available = %+v", p)
	}
}
