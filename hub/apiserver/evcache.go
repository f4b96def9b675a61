package apiserver

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/store"
)

// eventCache keeps the wire bytes of recent watch events, so that a
// change seen by a hundred watchers is decoded and encoded once per
// encoding, not a hundred times. It holds at most maxEntries events and
// maxBytes of their bytes, dropping the oldest first: watchers send an
// event at about the same time, so only recent ones are worth keeping, and
// their size, not their number, is what costs memory (400 events of
// 500 KB in two encodings are 400 MB). Entries are immutable once stored.
type eventCache struct {
	maxEntries, maxBytes int

	mu    sync.Mutex
	items map[eventKey][]byte
	order []eventKey // FIFO eviction
	bytes int        // held by items
}

type eventKey struct {
	rev   int64
	key   string
	media string
	// version is the resource's: the versions of one resource share its
	// store keys.
	version string
	deleted bool // the previous object, stamped with the delete's revision
}

func newEventCache(maxEntries, maxBytes int) *eventCache {
	return &eventCache{maxEntries: maxEntries, maxBytes: maxBytes, items: make(map[eventKey][]byte)}
}

func (c *eventCache) get(k eventKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.items[k]
	return b, ok
}

// entrySize is what an entry of b costs, with its key.
func entrySize(k eventKey, b []byte) int { return len(b) + len(k.key) + len(k.media) + 64 }

func (c *eventCache) put(k eventKey, b []byte) {
	size := entrySize(k, b)
	if size > c.maxBytes {
		return // it would push out everything else
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[k]; ok {
		return
	}
	for len(c.order) > 0 && (len(c.order) >= c.maxEntries || c.bytes+size > c.maxBytes) {
		old := c.order[0]
		c.bytes -= entrySize(old, c.items[old])
		delete(c.items, old)
		c.order[0] = eventKey{}
		c.order = c.order[1:]
	}
	c.items[k] = b
	c.order = append(c.order, k)
	c.bytes += size
}

// encodedEvent returns the bytes on the wire of the watch event for ev in
// media: the new object, or with deleted the last object before a delete
// stamped with the delete's revision, encoded by enc and wrapped by
// envelope. Every watcher without selectors sends these same bytes, so they
// are built once. The caller must not change them.
func (s *Server) encodedEvent(res *resourceInfo, ev store.Event, deleted bool, media string,
	envelope func(raw []byte) ([]byte, error), encode func(runtime.Object, io.Writer) error) ([]byte, error) {
	k := eventKey{rev: ev.Revision(), key: ev.KV.Key, media: media, version: res.GroupVersion.Version, deleted: deleted}
	if b, ok := s.events.get(k); ok {
		return b, nil
	}
	kv := ev.KV
	if deleted {
		kv = *ev.PrevKV
	}
	obj, err := res.decode(kv)
	if err != nil {
		return nil, err
	}
	if deleted {
		m, _ := meta.Accessor(obj)
		m.SetResourceVersion(strconv.FormatInt(ev.Revision(), 10))
	}
	var buf bytes.Buffer
	if err := encode(obj, &buf); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	if strings.HasPrefix(media, runtime.ContentTypeJSON) {
		raw = bytes.TrimSpace(raw) // the trailing newline; protobuf bytes are kept whole
	}
	b, err := envelope(raw)
	if err != nil {
		return nil, err
	}
	s.events.put(k, b)
	return b, nil
}
