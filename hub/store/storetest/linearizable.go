package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/outpost-mesh/outpost/hub/store"
)

// The linearizability model: a few keys and the global revision. Every
// successful write must take exactly the next revision, so the check covers
// revision assignment as well as values and compare-and-swap.

const linKeys = 3

type linKey struct {
	live              bool
	value             int
	createRev, modRev int64
}

type linState struct {
	rev  int64
	keys [linKeys]linKey
}

type linOp int

const (
	linGet linOp = iota
	linCreate
	linUpdate
	linDelete
)

type linInput struct {
	op     linOp
	key    int
	value  int
	modRev int64
}

type linOutput struct {
	ok       bool  // the write applied, or the key was found
	exists   bool  // Create found the key
	conflict bool  // the modRev precondition failed
	rev      int64 // revision of an applied write
	value    int   // Get's value
	mod      int64 // Get's ModRevision, or the current one in a conflict
	create   int64 // Get's CreateRevision
}

var linModel = porcupine.Model{
	Init: func() interface{} { panic("set per run") },
	Step: func(st, in, out interface{}) (bool, interface{}) {
		s, i, o := st.(linState), in.(linInput), out.(linOutput)
		k := s.keys[i.key]
		switch i.op {
		case linGet:
			if !k.live {
				return !o.ok, s
			}
			return o.ok && o.value == k.value && o.mod == k.modRev && o.create == k.createRev, s
		case linCreate:
			if k.live {
				return o.exists && o.mod == k.modRev, s
			}
			if !o.ok || o.rev != s.rev+1 {
				return false, s
			}
			s.rev++
			s.keys[i.key] = linKey{live: true, value: i.value, createRev: s.rev, modRev: s.rev}
			return true, s
		default: // update, delete
			if !k.live {
				return !o.ok && !o.conflict, s
			}
			if i.modRev != 0 && i.modRev != k.modRev {
				return o.conflict && o.mod == k.modRev, s
			}
			if !o.ok || o.rev != s.rev+1 {
				return false, s
			}
			s.rev++
			if i.op == linUpdate {
				s.keys[i.key] = linKey{live: true, value: i.value, createRev: k.createRev, modRev: s.rev}
			} else {
				s.keys[i.key] = linKey{}
			}
			return true, s
		}
	},
	DescribeOperation: func(in, out interface{}) string {
		return fmt.Sprintf("%+v -> %+v", in, out)
	},
}

func testLinearizable(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	start, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const clients, opsPer = 6, 80
	keyName := func(i int) string { return fmt.Sprintf("/registry/lin/k%d", i) }
	epoch := time.Now()
	now := func() int64 { return int64(time.Since(epoch)) }

	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 42))
			seen := map[int]int64{} // key -> last ModRevision this client saw
			for n := 0; n < opsPer; n++ {
				in := linInput{op: linOp(rng.IntN(4)), key: rng.IntN(linKeys), value: c*1000 + n}
				switch r := rng.IntN(10); {
				case r < 7:
					in.modRev = seen[in.key]
				case r < 8:
					in.modRev = 0
				default:
					in.modRev = seen[in.key] + 1 + int64(rng.IntN(3))
				}
				var out linOutput
				call := now()
				var opErr error
				switch in.op {
				case linGet:
					kv, err := s.Get(ctx, keyName(in.key), 0)
					if err == nil {
						fmt.Sscan(string(kv.Value), &out.value)
						out.ok, out.mod, out.create = true, kv.ModRevision, kv.CreateRevision
						seen[in.key] = kv.ModRevision
					} else if !errors.Is(err, store.ErrNotFound) {
						opErr = err
					}
				case linCreate:
					kv, err := s.Create(ctx, keyName(in.key), []byte(fmt.Sprint(in.value)))
					opErr = classify(err, &out)
					if err == nil {
						out.ok, out.rev = true, kv.ModRevision
						seen[in.key] = kv.ModRevision
					}
				case linUpdate:
					kv, err := s.Update(ctx, keyName(in.key), []byte(fmt.Sprint(in.value)), in.modRev)
					opErr = classify(err, &out)
					if err == nil {
						out.ok, out.rev = true, kv.ModRevision
						seen[in.key] = kv.ModRevision
					}
				case linDelete:
					_, rev, err := s.Delete(ctx, keyName(in.key), in.modRev)
					opErr = classify(err, &out)
					if err == nil {
						out.ok, out.rev = true, rev
					}
				}
				ret := now()
				if opErr != nil {
					t.Errorf("client %d op %+v: %v", c, in, opErr)
					return
				}
				if out.conflict || out.exists {
					seen[in.key] = out.mod
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	model := linModel
	model.Init = func() interface{} { return linState{rev: start} }
	res := porcupine.CheckOperationsTimeout(model, history, time.Minute)
	if res != porcupine.Ok {
		t.Fatalf("history of %d operations is %s, want linearizable", len(history), res)
	}
	t.Logf("%d operations by %d clients: linearizable", len(history), clients)
}

// classify fills the expected failure kinds into out and returns any other
// error.
func classify(err error, out *linOutput) error {
	var ce *store.ConflictError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		out.exists, out.conflict = ce.Exists, !ce.Exists
		out.mod = ce.Current.ModRevision
		return nil
	case errors.Is(err, store.ErrNotFound):
		return nil
	}
	return err
}
