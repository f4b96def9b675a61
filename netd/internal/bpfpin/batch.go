package bpfpin

import (
	"errors"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// Batch is map entries to write in one batch.
type Batch[K, V any] struct {
	Keys []K
	Vals []V
}

// Add appends the entry k, v.
func (b *Batch[K, V]) Add(k K, v V) {
	b.Keys = append(b.Keys, k)
	b.Vals = append(b.Vals, v)
}

// Len returns how many entries b holds.
func (b *Batch[K, V]) Len() int { return len(b.Keys) }

// Put writes b's entries to m, in one batch where the kernel has batch
// operations (5.6), else one at a time.
func Put[K, V any](m *ebpf.Map, b Batch[K, V]) error {
	return put(m, b, 0)
}

// PutLocked writes b's entries to m, whose values hold a bpf_spin_lock,
// with BPF_F_LOCK: an entry that exists is rewritten in place while its
// lock is held, so that a program that copies it under the lock sees the
// whole old value or the whole new one, and a lookup racing the write
// always finds the key. (A plain update links a new element in place of
// the old one and frees the old at once; a lookup standing on the old
// element when it is reused for another key can miss the key that is
// there all along.) New keys are inserted as Put does.
func PutLocked[K, V any](m *ebpf.Map, b Batch[K, V]) error {
	return put(m, b, ebpf.UpdateLock)
}

func put[K, V any](m *ebpf.Map, b Batch[K, V], flags ebpf.MapUpdateFlags) error {
	if len(b.Keys) == 0 {
		return nil
	}
	_, err := m.BatchUpdate(b.Keys, b.Vals, &ebpf.BatchOptions{ElemFlags: uint64(flags)})
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range b.Keys {
		if err := m.Update(b.Keys[i], b.Vals[i], flags); err != nil {
			return err
		}
	}
	return nil
}

// Delete deletes keys from m, in one batch where the kernel can; a key
// already gone is not an error.
func Delete[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	n, err := m.BatchDelete(keys, nil)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	// One at a time from where the batch stopped.
	for _, k := range keys[min(max(n, 0), len(keys)):] {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// Entries reads every entry of m. The caller owns the returned map.
func Entries[K comparable, V any](m *ebpf.Map) (map[K]V, error) {
	out := map[K]V{}
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// LockedKV returns the BTF of a hash map's key of keySize bytes and of
// its value of valueSize bytes that holds a bpf_spin_lock at lockOff, a
// multiple of 4: what MapSpec.Key and Value need for the kernel to find
// the lock (see PutLocked). Only the lock is described as a field, the
// rest as the bytes it is. name names the value's type.
func LockedKV(name string, keySize, valueSize, lockOff uint32) (key, value btf.Type) {
	u8 := &btf.Int{Name: "u8", Size: 1}
	u32 := &btf.Int{Name: "u32", Size: 4}
	bytes := func(n uint32) btf.Type { return &btf.Array{Index: u32, Type: u8, Nelems: n} }
	lock := &btf.Struct{Name: "bpf_spin_lock", Size: 4, Members: []btf.Member{{Name: "val", Type: u32}}}
	members := []btf.Member{{Name: "lock", Type: lock, Offset: btf.Bits(lockOff * 8)}}
	if lockOff > 0 {
		members = append([]btf.Member{{Name: "head", Type: bytes(lockOff)}}, members...)
	}
	if rest := valueSize - lockOff - 4; rest > 0 {
		members = append(members, btf.Member{Name: "rest", Type: bytes(rest), Offset: btf.Bits((lockOff + 4) * 8)})
	}
	return bytes(keySize), &btf.Struct{Name: name, Size: valueSize, Members: members}
}
