package bpfasm

import (
	"os"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

func TestBlocks(t *testing.T) {
	if got, want := Zero(-24, 24), (asm.Instructions{Zero64(-24), Zero64(-16), Zero64(-8)}); !slices.Equal(got, want) {
		t.Errorf("Zero(-24, 24) = %v, want %v", got, want)
	}
	got := CopyMem(asm.RFP, -16, asm.R6, 4, 16, asm.Word)
	if len(got) != 8 || got[0] != asm.LoadMem(asm.R1, asm.R6, 4, asm.Word) || got[7] != asm.StoreMem(asm.RFP, -4, asm.R1, asm.Word) {
		t.Errorf("CopyMem of 16 bytes by words = %v", got)
	}
}

// TestLoad: a program's map references are resolved by name, maps it
// does not use are passed over, and the spec is left as it was.
func TestLoad(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loads eBPF programs")
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	insns := asm.Instructions{Zero64(-8)}
	insns = append(insns, Update("m", -8, -4)...)
	insns = append(insns, Lookup("m", -8)...)
	insns = append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
	spec := &ebpf.ProgramSpec{Type: ebpf.SocketFilter, Instructions: insns, License: "Dual BSD/GPL"}
	p, err := Load("test", spec, map[string]*ebpf.Map{"m": m, "unused": m})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := Load("test", spec, nil); err == nil {
		t.Error("Load with the map missing succeeded")
	}
	if spec.Instructions[1].Reference() != "m" || spec.Instructions[1].Map() != nil {
		t.Error("Load changed the spec's instructions")
	}
}
