package storebench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
)

// Run measures phases of backend b in this process and returns what they
// measured. Each phase gets a fresh store in a temporary directory under
// cfg.Dir, closed and removed before the next starts. Memory figures are
// the whole process's, so measure memory in a process of its own (as the
// command's workers do) to keep other phases out of it.
func Run(ctx context.Context, cfg Config, b Backend, phases ...Phase) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	if _, err := ParseBackend(string(b)); err != nil {
		return nil, err
	}
	if len(phases) == 0 {
		phases = Phases
	}
	res := &Result{Backend: b, Setup: setup(b)}
	for _, p := range phases {
		if err := runPhase(ctx, cfg, b, p, res); err != nil {
			return nil, fmt.Errorf("%s %s: %w", b, p, err)
		}
	}
	return res, nil
}

func runPhase(ctx context.Context, cfg Config, b Backend, p Phase, res *Result) (err error) {
	var baseline childhub.Sample
	if p == PhaseMemory {
		if baseline, err = settledStatus(); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp(cfg.Dir, "outpost-storebench-"+string(b)+"-")
	if err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove data dir: %w", rmErr)
		}
	}()
	inst, err := open(ctx, b, dir)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := inst.close(); cerr != nil && err == nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
	}()

	switch p {
	case PhaseWrites:
		res.Writes, err = measureWrites(ctx, inst.store, cfg)
	case PhaseWatch:
		res.Watch, err = measureWatch(ctx, inst.store, cfg)
	case PhaseMemory:
		res.Memory, err = measureMemory(ctx, inst, cfg, baseline)
	default:
		err = fmt.Errorf("unknown phase %q", p)
	}
	return err
}

// valueSource fills values with random bytes; one per goroutine.
type valueSource struct {
	r    *rand.ChaCha8
	size int
}

func newValueSource(seed uint64, size int) *valueSource {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return &valueSource{r: rand.NewChaCha8(s), size: size}
}

// next returns a new value of random bytes; the caller owns it.
func (v *valueSource) next() []byte {
	b := make([]byte, v.size)
	v.r.Read(b)
	return b
}

// isCanceled reports whether err came from ctx ending.
func isCanceled(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}
