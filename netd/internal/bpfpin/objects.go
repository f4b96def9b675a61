package bpfpin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Objects are the maps and links of one dataplane, pinned under Dir and
// keyed by their pin names. A dataplane opens them one by one; if it
// fails part way, Abandon takes back what it pinned itself, so that a
// failed first New leaves nothing attached, while what it adopted stays.
// Objects is not safe for concurrent use: its dataplane locks.
type Objects struct {
	Dir   string
	Maps  map[string]*ebpf.Map
	Links map[string]link.Link
	// made are the maps and links pinned by this process, in order.
	made []interface{ Unpin() error }
}

// NewObjects returns an empty set of objects pinned under dir.
func NewObjects(dir string) *Objects {
	return &Objects{Dir: dir, Maps: map[string]*ebpf.Map{}, Links: map[string]link.Link{}}
}

// OpenMap adopts the map pinned as name, or makes and pins it (see
// OpenMap), and adds it to o.Maps.
func (o *Objects) OpenMap(name string, spec *ebpf.MapSpec) error {
	m, pinned, err := OpenMap(filepath.Join(o.Dir, name), spec)
	if err != nil {
		return fmt.Errorf("map %s: %w", name, err)
	}
	o.Maps[name] = m
	if pinned {
		o.made = append(o.made, m)
	}
	return nil
}

// AddLink adds l, pinned as name, to o.Links; pinned says this process
// pinned it.
func (o *Objects) AddLink(name string, l link.Link, pinned bool) {
	o.Links[name] = l
	if pinned {
		o.made = append(o.made, l)
	}
}

// Abandon unpins, last first, what o pinned itself, closes every handle,
// and removes Dir if it pinned anything and Dir is then empty. It is for
// a New that failed: errors are not reported, the New's own is.
func (o *Objects) Abandon() {
	for _, p := range slices.Backward(o.made) {
		p.Unpin()
	}
	o.Close()
	if len(o.made) > 0 {
		os.Remove(o.Dir) // if empty
	}
	o.made = nil
}

// Close closes the handles and forgets them; the pins stay. It may be
// called more than once.
func (o *Objects) Close() error {
	var errs []error
	for name, l := range o.Links {
		errs = append(errs, l.Close())
		delete(o.Links, name)
	}
	for name, m := range o.Maps {
		errs = append(errs, m.Close())
		delete(o.Maps, name)
	}
	return errors.Join(errs...)
}

// Unpin removes the pins of o's links, then of its maps, so that the
// programs stop before the maps they read go; the handles stay open
// (closing the last handle of an unpinned link detaches it).
func (o *Objects) Unpin() error {
	var errs []error
	for _, name := range sortedKeys(o.Links) {
		if err := o.Links[name].Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpin link %s: %w", name, err))
		}
	}
	for _, name := range sortedKeys(o.Maps) {
		if err := o.Maps[name].Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpin map %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Remove takes the objects away: it unpins them, closes them and removes
// Dir.
func (o *Objects) Remove() error {
	errs := []error{o.Unpin(), o.Close()}
	if err := os.Remove(o.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("pin dir: %w", err))
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
