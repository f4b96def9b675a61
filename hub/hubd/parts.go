package hubd

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// part is one of the hub's long-running parts: it runs until its context
// ends or it fails.
type part struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // valid once done is closed
}

// parts are the hub's running parts, stopped in an explicit order.
type parts struct {
	failed   chan struct{} // closed when a part returns on its own
	failOnce sync.Once
	all      []*part
	stopping []*part // the order of stop; the rest stop after, in reverse of start
	stopped  bool
}

// start runs fn as the part name, with a context of its own derived from
// ctx, until stop.
func (ps *parts) start(name string, ctx context.Context, fn func(context.Context) error) *part {
	if ps.failed == nil {
		ps.failed = make(chan struct{})
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &part{name: name, cancel: cancel, done: make(chan struct{})}
	ps.all = append(ps.all, p)
	go func() {
		defer close(p.done)
		p.err = fn(ctx)
		if ctx.Err() == nil {
			if p.err == nil {
				p.err = errors.New("stopped on its own")
			}
			ps.failOnce.Do(func() { close(ps.failed) })
		}
	}()
	return p
}

// order sets the order in which stop stops the parts; nil entries, parts
// that were not started, are skipped.
func (ps *parts) order(first ...*part) {
	ps.stopping = nil
	for _, p := range first {
		if p != nil {
			ps.stopping = append(ps.stopping, p)
		}
	}
}

// stop stops every part, each after the one before it has returned: first
// those given to order, in that order, then the others in the reverse of
// their start. Calling it again does nothing.
func (ps *parts) stop() {
	if ps.stopped {
		return
	}
	ps.stopped = true
	seq := append([]*part(nil), ps.stopping...)
	for i := len(ps.all) - 1; i >= 0; i-- {
		p := ps.all[i]
		listed := false
		for _, q := range ps.stopping {
			listed = listed || q == p
		}
		if !listed {
			seq = append(seq, p)
		}
	}
	for _, p := range seq {
		p.cancel()
		<-p.done
	}
}

// err returns the errors of the parts that failed, once stopped.
func (ps *parts) err() error {
	var errs []error
	for _, p := range ps.all {
		if p.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.name, p.err))
		}
	}
	return errors.Join(errs...)
}
