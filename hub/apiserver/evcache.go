package apiserver

import (
	"bytes"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/outpost-mesh/outpost/hub/store"
)

// eventCache keeps the encoded objects of recent watch events, so that a
// change seen by a hundred watchers is decoded and encoded once per
// encoding, not a hundred times. Entries are immutable once stored.
type eventCache struct {
	mu    sync.Mutex
	max   int
	items map[eventKey][]byte
	order []eventKey // FIFO eviction
}

type eventKey struct {
	rev     int64
	key     string
	media   string
	deleted bool // the previous object, stamped with the delete's revision
}

func newEventCache(max int) *eventCache {
	return &eventCache{max: max, items: make(map[eventKey][]byte, max)}
}

func (c *eventCache) get(k eventKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.items[k]
	return b, ok
}

func (c *eventCache) put(k eventKey, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[k]; ok {
		return
	}
	if len(c.order) >= c.max {
		delete(c.items, c.order[0])
		c.order = c.order[1:]
	}
	c.items[k] = b
	c.order = append(c.order, k)
}

// encodedEventObject returns the encoded object a watch event carries for
// ev: the new object, or with deleted the last object before a delete,
// stamped with the delete's revision. The caller must not change the bytes.
func (s *Server) encodedEventObject(res *resourceInfo, ev store.Event, deleted bool, enc runtime.Encoder, media string) ([]byte, error) {
	k := eventKey{rev: ev.Revision(), key: ev.KV.Key, media: media, deleted: deleted}
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
	if err := enc.Encode(obj, &buf); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if media == runtime.ContentTypeJSON {
		b = bytes.TrimSpace(b) // the trailing newline; protobuf bytes are kept whole
	}
	s.events.put(k, b)
	return b, nil
}
