package tcnat

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Supported returns nil if the kernel can run the dataplane, or an error
// wrapping ebpf.ErrNotSupported naming what it lacks (the agent then
// translates traffic from outside with nftables); other errors say the
// probe itself failed (not root, say). It loads the dataplane's own
// programs, so the verifier has its say, and attaches one with tcx
// (Linux 6.6) to the loopback of a scratch network namespace.
func Supported() error {
	if err := features.HaveProgramType(ebpf.SchedCLS); err != nil {
		return fmt.Errorf("sched_cls programs: %w", err)
	}
	for _, fn := range []asm.BuiltinFunc{asm.FnSkbLoadBytes, asm.FnSkbStoreBytes, asm.FnL3CsumReplace,
		asm.FnL4CsumReplace, asm.FnCsumDiff, asm.FnGetPrandomU32, asm.FnKtimeGetNs, asm.FnSpinLock, asm.FnSpinUnlock} {
		if err := features.HaveProgramHelper(ebpf.SchedCLS, fn); err != nil {
			return fmt.Errorf("helper %s in sched_cls programs: %w", fn, err)
		}
	}
	if err := features.HaveMapType(ebpf.LRUHash); err != nil {
		return fmt.Errorf("LRU hash maps: %w", err)
	}
	cfg := DefaultConfig()
	cfg.FlowEntries, cfg.AffinityEntries = 1, 1
	maps := map[string]*ebpf.Map{}
	defer func() {
		for _, m := range maps {
			m.Close()
		}
	}()
	for name, spec := range mapSpecs(&cfg) {
		spec.Flags &^= noPrealloc
		spec.MaxEntries = 1
		m, err := ebpf.NewMap(spec)
		if err != nil {
			return fmt.Errorf("map %s: %w", name, err)
		}
		maps[name] = m
	}
	var progs []*ebpf.Program
	defer func() {
		for _, p := range progs {
			p.Close()
		}
	}()
	for _, dir := range directions {
		p, err := load(dir, cfg.MasqueradeMark, maps)
		if err != nil {
			return err
		}
		progs = append(progs, p)
	}
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("scratch netns: %w", err)
		}
		return nil
	}, func() error {
		// The loopback is index 1 in every namespace.
		l, err := link.AttachTCX(link.TCXOptions{Interface: 1, Program: progs[0], Attach: ebpf.AttachTCXIngress})
		if err == nil {
			l.Close()
		}
		return err
	})
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			err = fmt.Errorf("%w: %w", err, ebpf.ErrNotSupported)
		}
		return fmt.Errorf("tcx: %w", err)
	}
	return nil
}
