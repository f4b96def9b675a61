// Package bpfasm holds the instruction building blocks that the eBPF
// programs of netd's dataplanes (netd/ebpflb and netd/tcnat), written in
// Go with cilium/ebpf's asm package, share, and loads such a program
// against its maps. Only packages under netd import it.
package bpfasm

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Lookup calls bpf_map_lookup_elem on the map named m with the key on
// the stack at off; the value's pointer or NULL is in R0.
func Lookup(m string, off int16) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, 0).WithReference(m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(off)),
		asm.FnMapLookupElem.Call(),
	}
}

// Update calls bpf_map_update_elem(m, key at koff, value at voff,
// BPF_ANY).
func Update(m string, koff, voff int16) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, 0).WithReference(m),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(koff)),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(voff)),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnMapUpdateElem.Call(),
	}
}

// Zero64 stores a zero u64 on the stack at off. (asm.StoreImm refuses
// the 64-bit size, which the kernel has always had: the immediate is
// sign extended.)
func Zero64(off int16) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(asm.DWord), Dst: asm.RFP, Offset: off}
}

// Zero stores n zero bytes (a multiple of 8) on the stack at off.
func Zero(off, n int16) asm.Instructions {
	var insns asm.Instructions
	for i := int16(0); i < n; i += 8 {
		insns = append(insns, Zero64(off+i))
	}
	return insns
}

// CopyMem copies n bytes (a multiple of size) from src+soff to
// dst+doff, through R1.
func CopyMem(dst asm.Register, doff int16, src asm.Register, soff int16, n int16, size asm.Size) asm.Instructions {
	var insns asm.Instructions
	w := int16(size.Sizeof())
	for i := int16(0); i < n; i += w {
		insns = append(insns,
			asm.LoadMem(asm.R1, src, soff+i, size),
			asm.StoreMem(dst, doff+i, asm.R1, size))
	}
	return insns
}

// Load loads the program of spec, its references to the maps resolved
// against maps (by name; a map the program does not use is passed
// over). spec is not modified. name names the program in errors.
func Load(name string, spec *ebpf.ProgramSpec, maps map[string]*ebpf.Map) (*ebpf.Program, error) {
	spec = spec.Copy()
	for mn, m := range maps {
		if err := spec.Instructions.AssociateMap(mn, m); err != nil && len(spec.Instructions.ReferenceOffsets()[mn]) > 0 {
			return nil, fmt.Errorf("program %s: map %s: %w", name, mn, err)
		}
	}
	p, err := ebpf.NewProgram(spec)
	if err != nil {
		return nil, fmt.Errorf("load program %s: %w", name, err)
	}
	return p, nil
}
