package bpfpin

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/outpost-mesh/outpost/internal/netnstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bpffs mounts a bpffs of t's own, gone when t ends with whatever t
// left pinned, and returns its directory.
func bpffs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts bpffs, makes maps")
	}
	dir := filepath.Join(t.TempDir(), "bpf")
	if err := MountBPFFS(dir); err != nil {
		t.Fatal(err)
	}
	// A second mount is not made over the first.
	if err := MountBPFFS(dir); err != nil {
		t.Fatalf("MountBPFFS again: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount bpffs: %v", err)
		}
	})
	return dir
}

func hashSpec(name string, n uint32) *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: name, Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: n, Flags: unix.BPF_F_NO_PREALLOC}
}

func contents(t *testing.T, m *ebpf.Map) map[uint32]uint32 {
	t.Helper()
	out, err := Entries[uint32, uint32](m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOpenMap: a map is made and pinned, adopted with its entries by a
// second open, and refused when the spec no longer matches it.
func TestOpenMap(t *testing.T) {
	path := filepath.Join(bpffs(t), "m")
	m, pinned, err := OpenMap(path, hashSpec("t", 8))
	if err != nil || !pinned {
		t.Fatalf("OpenMap = %v, %v; want made and pinned", pinned, err)
	}
	defer m.Close()
	if err := m.Put(uint32(1), uint32(2)); err != nil {
		t.Fatal(err)
	}
	m2, pinned, err := OpenMap(path, hashSpec("t", 8))
	if err != nil || pinned {
		t.Fatalf("OpenMap again = %v, %v; want adopted", pinned, err)
	}
	defer m2.Close()
	if got := contents(t, m2); got[1] != 2 || len(got) != 1 {
		t.Errorf("adopted map holds %v", got)
	}
	if _, _, err := OpenMap(path, hashSpec("t", 16)); err == nil {
		t.Error("OpenMap with other sizes adopted the pinned map")
	}
}

// TestPutDelete: batches write and delete, a key already gone is not an
// error, and empty batches do nothing.
func TestPutDelete(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes maps")
	}
	m, err := ebpf.NewMap(hashSpec("t", 64))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var b Batch[uint32, uint32]
	if err := Put(m, b); err != nil {
		t.Fatalf("Put of nothing: %v", err)
	}
	for i := range uint32(10) {
		b.Add(i, i*10)
	}
	if b.Len() != 10 {
		t.Fatalf("Len = %d", b.Len())
	}
	if err := Put(m, b); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, m); len(got) != 10 || got[7] != 70 {
		t.Fatalf("after Put: %v", got)
	}
	// 3 and 4 are deleted twice: the second time they are gone.
	if err := Delete(m, []uint32{3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := Delete(m, []uint32{1, 3, 4, 99, 5}); err != nil {
		t.Fatalf("Delete of keys partly gone: %v", err)
	}
	if err := Delete[uint32](m, nil); err != nil {
		t.Fatal(err)
	}
	got := contents(t, m)
	var keys []uint32
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []uint32{0, 2, 6, 7, 8, 9}; !slices.Equal(keys, want) {
		t.Errorf("keys after Delete %v, want %v", keys, want)
	}
}

// TestMakeDirRemovePins: nothing is made off bpffs; pins are removed in
// order, then the directory; a directory gone is not an error.
func TestMakeDirRemovePins(t *testing.T) {
	off := filepath.Join(t.TempDir(), "a", "b")
	if err := MakeDir(off); err == nil {
		t.Fatal("MakeDir off bpffs succeeded")
	}
	if _, err := os.Stat(filepath.Dir(off)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("MakeDir made directories off bpffs: %v", err)
	}
	if err := RemovePins(filepath.Dir(off), nil); err != nil {
		t.Errorf("RemovePins of a missing dir: %v", err)
	}
	if err := RemovePins(t.TempDir(), nil); err == nil {
		t.Error("RemovePins off bpffs succeeded")
	}

	dir := filepath.Join(bpffs(t), "node", "x")
	if err := MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	o := NewObjects(dir)
	for _, name := range []string{"m1", "m2", "link_a"} {
		if err := o.OpenMap(name, hashSpec("t", 4)); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	names, err := Names(dir, "link_")
	if err != nil || !slices.Equal(names, []string{"link_a"}) {
		t.Fatalf("Names = %v, %v", names, err)
	}
	if err := RemovePins(dir, []string{"link_a", "m1", "m2", "gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin dir after RemovePins: %v", err)
	}
}

// TestAbandon: a failed open takes back what it pinned and keeps what
// it adopted.
func TestAbandon(t *testing.T) {
	dir := filepath.Join(bpffs(t), "node")
	if err := MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	old, _, err := OpenMap(filepath.Join(dir, "old"), hashSpec("t", 4))
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	o := NewObjects(dir)
	for _, name := range []string{"old", "new"} {
		if err := o.OpenMap(name, hashSpec("t", 4)); err != nil {
			t.Fatal(err)
		}
	}
	o.Abandon()
	if len(o.Maps) != 0 {
		t.Errorf("%d maps open after Abandon", len(o.Maps))
	}
	names, err := Names(dir, "")
	if err != nil || !slices.Equal(names, []string{"old"}) {
		t.Errorf("pins after Abandon %v, %v; want the adopted one", names, err)
	}
	o = NewObjects(dir)
	if err := o.OpenMap("old", hashSpec("t", 4)); err != nil {
		t.Fatal(err)
	}
	if err := o.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin dir after Remove: %v", err)
	}
}

// TestRuns: a link runs the program it was attached with, on the maps it
// was loaded against, and not another.
func TestRuns(t *testing.T) {
	if !netnstest.Enter(t) {
		return
	}
	m, err := ebpf.NewMap(hashSpec("t", 4))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	other, err := ebpf.NewMap(hashSpec("t", 4))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	prog := func(ret int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.RFP, -4, asm.R1, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R0, ret).WithSymbol("out"),
			asm.Return(),
		}
	}
	insns := prog(-1) // TCX_NEXT
	spec := &ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: slices.Clone(insns), License: "Dual BSD/GPL"}
	if err := spec.Instructions.AssociateMap("m", m); err != nil {
		t.Fatal(err)
	}
	p, err := ebpf.NewProgram(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := link.AttachTCX(link.TCXOptions{Interface: 1, Program: p, Attach: ebpf.AttachTCXIngress})
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("tcx: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		insns asm.Instructions
		want  bool
	}{{insns, true}, {prog(0), false}} {
		if got, err := Runs(info, tc.insns); err != nil || got != tc.want {
			t.Errorf("Runs = %v, %v; want %v", got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		maps map[string]*ebpf.Map
		want bool
	}{
		{map[string]*ebpf.Map{"m": m}, true},
		{map[string]*ebpf.Map{"m": m, "o": other}, true},
		{map[string]*ebpf.Map{"o": other}, false},
	} {
		if got, err := UsesOnly(info, tc.maps); err != nil || got != tc.want {
			t.Errorf("UsesOnly(%v) = %v, %v; want %v", tc.maps, got, err, tc.want)
		}
	}
}

// TestPutLocked: a map whose value holds a bpf_spin_lock, described by
// LockedKV, takes new entries and rewrites those that exist with
// PutLocked; a map without the lock refuses it, so the flag does reach
// the kernel.
func TestPutLocked(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes maps")
	}
	type val struct{ A, B, Lock, C uint32 }
	key, value := LockedKV("t_locked", 4, 16, 8)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "t", Type: ebpf.Hash, KeySize: 4, ValueSize: 16, MaxEntries: 64,
		Flags: unix.BPF_F_NO_PREALLOC, Key: key, Value: value})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var b Batch[uint32, val]
	for i := range uint32(5) {
		b.Add(i, val{A: i, B: 1, C: 2})
	}
	if err := PutLocked(m, b); err != nil {
		t.Fatalf("PutLocked of new keys: %v", err)
	}
	b = Batch[uint32, val]{}
	b.Add(3, val{A: 30, B: 31, C: 32})
	b.Add(7, val{A: 70})
	if err := PutLocked(m, b); err != nil {
		t.Fatalf("PutLocked over an entry: %v", err)
	}
	got, err := Entries[uint32, val](m)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || got[3] != (val{A: 30, B: 31, C: 32}) || got[7] != (val{A: 70}) || got[4] != (val{A: 4, B: 1, C: 2}) {
		t.Errorf("entries after PutLocked: %v", got)
	}

	plain, err := ebpf.NewMap(&ebpf.MapSpec{Name: "t", Type: ebpf.Hash, KeySize: 4, ValueSize: 16, MaxEntries: 64, Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := PutLocked(plain, b); err == nil {
		t.Error("PutLocked on a map without a lock succeeded")
	}
}
