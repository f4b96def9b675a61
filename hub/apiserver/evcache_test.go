package apiserver

import (
	"strconv"
	"testing"
)

// TestEventCacheBounds: the cache holds at most its bytes and its entries,
// dropping the oldest first, and never an entry larger than all of it.
func TestEventCacheBounds(t *testing.T) {
	key := func(i int) eventKey { return eventKey{rev: int64(i), key: "k", media: "m"} }
	val := make([]byte, 1000)
	per := entrySize(key(0), val)
	c := newEventCache(100, 10*per)
	for i := range 25 {
		c.put(key(i), val)
		if c.bytes > c.maxBytes || len(c.items) > c.maxEntries {
			t.Fatalf("after %d puts: %d bytes in %d entries, bounds %d and %d", i+1, c.bytes, len(c.items), c.maxBytes, c.maxEntries)
		}
	}
	for i := range 25 {
		_, ok := c.get(key(i))
		if want := i >= 15; ok != want {
			t.Errorf("get(rev %d) found = %v, want %v (the newest 10 kept)", i, ok, want)
		}
	}
	c.put(eventKey{rev: 99, key: "big"}, make([]byte, 11*per))
	if _, ok := c.get(eventKey{rev: 99, key: "big"}); ok || len(c.items) != 10 {
		t.Errorf("an entry over the whole cache was kept (%d entries)", len(c.items))
	}
	small := newEventCache(3, 1<<30)
	for i := range 10 {
		small.put(eventKey{rev: int64(i), key: strconv.Itoa(i)}, val)
	}
	if len(small.items) != 3 || len(small.order) != 3 {
		t.Errorf("cache of 3 entries holds %d (%d in order)", len(small.items), len(small.order))
	}
}
