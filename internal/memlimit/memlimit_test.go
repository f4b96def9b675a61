package memlimit

import (
	"testing"
	"testing/fstest"
)

// TestChoose: the flag wins, then GOMEMLIMIT, then 3/4 of the lowest
// cgroup limit on the way up the process's cgroup, v2 or v1, then 3/4 of
// the machine's memory.
func TestChoose(t *testing.T) {
	meminfo := &fstest.MapFile{Data: []byte("MemTotal:       24576000 kB\nMemFree:  1 kB\n")}
	machine := int64(float64(24576000<<10) * Share)
	for _, tc := range []struct {
		name, flag, env string
		files           fstest.MapFS
		want            int64
		from            string
	}{
		{"flag size", "1.5GiB", "", nil, 3 << 29, "flag"},
		{"flag none", "none", "1GiB", nil, Unlimited, "flag"},
		{"flag zero", "0", "", nil, Unlimited, "flag"},
		{"GOMEMLIMIT kept", "auto", "1GiB", nil, -1, "GOMEMLIMIT"},
		{"machine", "", "", fstest.MapFS{"proc/meminfo": meminfo}, machine, "3/4 of the machine's 23.4 GiB"},
		{"cgroup v2", "", "", fstest.MapFS{
			"proc/meminfo":                       meminfo,
			"proc/self/cgroup":                   {Data: []byte("0::/a/b\n")},
			"sys/fs/cgroup/a/b/memory.max":       {Data: []byte("max\n")},
			"sys/fs/cgroup/a/memory.max":         {Data: []byte("2147483648\n")},
			"sys/fs/cgroup/memory.max":           {Data: []byte("max\n")},
			"sys/fs/cgroup/unified/a/memory.max": {Data: []byte("garbage\n")},
		}, 3 << 29, "3/4 of the cgroup's 2.0 GiB"},
		{"cgroup v1 beside v2", "", "", fstest.MapFS{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": {Data: []byte("12:cpu,cpuacct:/x\n5:memory:/x\n0::/x\n")},
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes": {Data: []byte("1073741824\n")},
			"sys/fs/cgroup/memory/memory.limit_in_bytes":   {Data: []byte("9223372036854771712\n")},
			"sys/fs/cgroup/unified/x/memory.max":           {Data: []byte("4294967296\n")},
		}, 3 << 28, "3/4 of the cgroup's 1.0 GiB"},
		{"cgroups without limits", "", "", fstest.MapFS{
			"proc/meminfo":             meminfo,
			"proc/self/cgroup":         {Data: []byte("0::/\n")},
			"sys/fs/cgroup/memory.max": {Data: []byte("max\n")},
		}, machine, "3/4 of the machine's 23.4 GiB"},
		{"nothing known", "", "", fstest.MapFS{}, Unlimited, "none: machine's memory unknown: open proc/meminfo: file does not exist"},
	} {
		files := tc.files
		if files == nil {
			files = fstest.MapFS{}
		}
		got, err := Choose(tc.flag, tc.env, files)
		if err != nil || got.Bytes != tc.want || got.From != tc.from {
			t.Errorf("%s: Choose(%q, %q) = %+v, %v; want %d from %q", tc.name, tc.flag, tc.env, got, err, tc.want, tc.from)
		}
	}
	for _, bad := range []string{"lots", "10MB", "-1GiB"} {
		if got, err := Choose(bad, "", fstest.MapFS{}); err == nil {
			t.Errorf("Choose(%q) = %+v, want an error", bad, got)
		}
	}
}
