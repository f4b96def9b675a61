package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/outpost-mesh/outpost/hub/store"
)

// watchWriter writes watch events in the negotiated framing: one JSON
// object per line, or length-prefixed protobuf WatchEvents. Events are
// gathered in a buffer of its own until flush, which the watch calls once
// per batch of events rather than once per event: the HTTP/2 server would
// otherwise cut them into 4 KiB DATA frames, each its own TLS record and
// write(2), where one write of the batch goes out in frames as large as the
// client allows.
type watchWriter struct {
	w       http.ResponseWriter
	flusher *http.ResponseController
	buf     *[]byte // pending events; from watchBufs, nil while empty
	out     output
	q       *request
	first   bool // no Table columns sent yet
	// enc encodes objects of the watched resource; streamEnc the
	// protobuf WatchEvent envelope.
	enc       runtime.Encoder
	streamEnc runtime.Encoder
}

func newWatchWriter(q *request, out output) *watchWriter {
	ww := &watchWriter{
		w: q.w, flusher: http.NewResponseController(q.w), out: out, q: q, first: true,
		enc: q.s.encoderFor(out.info.Serializer, q.res.GroupVersion),
	}
	if out.info.MediaType != runtime.ContentTypeJSON && out.info.StreamSerializer != nil {
		ww.streamEnc = q.s.encoderFor(out.info.StreamSerializer.Serializer, schema.GroupVersion{Version: "v1"})
	}
	return ww
}

// sendObject encodes and writes one event (as a Table row when asked).
func (ww *watchWriter) sendObject(typ watch.EventType, obj runtime.Object) error {
	if ww.out.partial && typ != watch.Error {
		obj = partialMetadata(obj)
	}
	if ww.out.table && typ != watch.Bookmark && typ != watch.Error {
		t, err := ww.q.table(obj)
		if err != nil {
			return err
		}
		if !ww.first {
			t.(*metav1.Table).ColumnDefinitions = nil
		}
		ww.first = false
		obj = t
	}
	var raw bytes.Buffer
	if err := ww.q.s.encoderFor(ww.out.info.Serializer, ww.q.s.versionOf(obj)).Encode(obj, &raw); err != nil {
		return err
	}
	b := raw.Bytes()
	if ww.streamEnc == nil {
		b = bytes.TrimSpace(b) // JSON ends with a newline; protobuf bytes are kept whole
	}
	return ww.sendRaw(typ, b)
}

// sendRaw writes one event whose object is already encoded.
func (ww *watchWriter) sendRaw(typ watch.EventType, raw []byte) error {
	b, err := ww.envelope(typ, raw)
	if err != nil {
		return err
	}
	return ww.write(b)
}

// watchBufs holds the buffers of watches between flushes, so that an idle
// watch keeps none.
var watchBufs = sync.Pool{New: func() any { b := make([]byte, 0, watchBufSize); return &b }}

// watchBufSize is the buffer a watch starts with; a batch larger than
// maxWatchBuf is written out before its flush.
const (
	watchBufSize = 32 << 10
	maxWatchBuf  = 256 << 10
)

// write adds b to the pending events.
func (ww *watchWriter) write(b []byte) error {
	if ww.buf == nil {
		ww.buf = watchBufs.Get().(*[]byte)
	}
	*ww.buf = append(*ww.buf, b...)
	if len(*ww.buf) >= maxWatchBuf {
		return ww.writeOut()
	}
	return nil
}

// writeOut hands the pending events to the connection and returns the
// buffer to the pool.
func (ww *watchWriter) writeOut() error {
	if ww.buf == nil {
		return nil
	}
	_, err := ww.w.Write(*ww.buf)
	if cap(*ww.buf) <= maxWatchBuf*2 {
		*ww.buf = (*ww.buf)[:0]
		watchBufs.Put(ww.buf)
	}
	ww.buf = nil
	return err
}

// envelope returns the bytes on the wire of one event: a JSON line, or a
// length-prefixed protobuf WatchEvent.
func (ww *watchWriter) envelope(typ watch.EventType, raw []byte) ([]byte, error) {
	if ww.streamEnc == nil {
		line := make([]byte, 0, len(raw)+32)
		line = append(line, `{"type":"`...)
		line = append(line, typ...)
		line = append(line, `","object":`...)
		line = append(line, raw...)
		return append(line, "}\n"...), nil
	}
	var buf bytes.Buffer
	ev := &metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}
	if err := ww.streamEnc.Encode(ev, &buf); err != nil {
		return nil, err
	}
	var framed bytes.Buffer
	if _, err := ww.out.info.StreamSerializer.Framer.NewFrameWriter(&framed).Write(buf.Bytes()); err != nil {
		return nil, err
	}
	return framed.Bytes(), nil
}

// flush sends the pending events to the client.
func (ww *watchWriter) flush() error {
	if err := ww.writeOut(); err != nil {
		return err
	}
	return ww.flusher.Flush()
}

// encode writes the encoded object of a store event: the object, or its
// metadata for a metadata-only watch.
func (ww *watchWriter) encode(obj runtime.Object, w io.Writer) error {
	if ww.out.partial {
		pm := partialMetadata(obj)
		return ww.q.s.encoderFor(ww.out.info.Serializer, metav1.SchemeGroupVersion).Encode(pm, w)
	}
	return ww.enc.Encode(obj, w)
}

// sendStoreEvent writes the event a store change is for this watch, if any.
// Without selectors or Tables every watcher sends the same bytes, encoded
// once for all of them.
func (ww *watchWriter) sendStoreEvent(ev store.Event, o listOptions) error {
	q := ww.q
	if !ww.out.table && o.label.Empty() && o.field.Empty() {
		typ, deleted := watch.Modified, false
		switch {
		case ev.Type == store.EventDelete:
			typ, deleted = watch.Deleted, true
		case ev.IsCreate():
			typ = watch.Added
		}
		wire, err := q.s.encodedEvent(q.res, ev, deleted, ww.out.info.MediaType+ww.out.asParam(), func(raw []byte) ([]byte, error) {
			return ww.envelope(typ, raw)
		}, ww.encode)
		if err != nil {
			return err
		}
		return ww.write(wire)
	}
	typ, obj, err := q.translate(ev, o)
	if err != nil || obj == nil {
		return err
	}
	return ww.sendObject(typ, obj)
}

func (q *request) watch() error {
	o, err := q.parseListOptions()
	if err != nil {
		return err
	}
	out, err := negotiate(q.r, q.res.codec, true)
	if err != nil {
		return err
	}
	if out.info.MediaType == runtime.ContentTypeYAML {
		out.info = q.res.codec.json()
	}
	ctx, stop := context.WithCancel(q.ctx())
	defer stop()
	go func(done <-chan struct{}) {
		select {
		case <-q.s.stop:
			stop()
		case <-q.res.gone:
			stop()
		case <-done:
		}
	}(ctx.Done())
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(o.timeout)*time.Second)
		defer cancel()
	}
	var from int64
	var initial *listScan
	if o.rv == "" || o.rv == "0" || o.initialEvent {
		// Start from the current state: ADDED for every object, then changes.
		lo := o
		lo.limit, lo.cont, lo.rv, lo.rvMatch = 0, nil, "", ""
		if initial, err = q.s.openList(ctx, q.res, q.ri.namespace, lo); err != nil {
			return err
		}
		from = initial.rev
	} else {
		from, _ = strconv.ParseInt(o.rv, 10, 64)
	}
	events, err := q.s.store.Watch(ctx, q.res.listPrefix(q.ri.namespace), from)
	ct := out.info.MediaType + out.asParam()
	q.w.Header().Set("Content-Type", ct)
	ww := newWatchWriter(q, out)
	if err != nil {
		// Upstream answers a watch from a compacted revision with 200 and
		// an ERROR event carrying 410 Gone, which reflectors act on.
		if errors.Is(err, store.ErrCompacted) {
			q.w.WriteHeader(http.StatusOK)
			ww.sendObject(watch.Error, toStatus(apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d", from))))
			ww.flush()
			return nil
		}
		return storeError(err, q.res.gr, "")
	}
	q.w.WriteHeader(http.StatusOK)
	if err := ww.flush(); err != nil {
		return nil // the connection cannot stream: nothing more to say on it
	}
	if initial != nil {
		// The objects as they are, a page at a time, each page flushed.
		err := initial.each(ctx, func(it *listItem) error {
			obj, err := it.object(q.res)
			if err != nil {
				return apierrors.NewInternalError(err)
			}
			return ww.sendObject(watch.Added, obj)
		})
		if err != nil {
			q.s.log.Debug("watch send", "err", err)
			if _, ok := err.(apierrors.APIStatus); ok {
				ww.sendObject(watch.Error, toStatus(err))
				ww.flush()
			}
			return nil
		}
	}
	if o.initialEvent {
		bm := q.bookmark(from)
		bm.(metav1.Object).SetAnnotations(map[string]string{"k8s.io/initial-events-end": "true"})
		if err := ww.sendObject(watch.Bookmark, bm); err != nil {
			q.s.log.Debug("watch send", "err", err)
			return nil
		}
	}
	if ww.flush() != nil {
		return nil
	}
	ticker := time.NewTicker(q.s.cfg.BookmarkInterval)
	defer ticker.Stop()
	fl := newFlushPacer(ww, q.s.cfg.WatchFlushInterval)
	defer fl.stop()
	last := from
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if o.bookmarks {
				if ww.sendObject(watch.Bookmark, q.bookmark(last)) != nil || fl.flushNow() != nil {
					return nil
				}
			}
		case <-fl.due():
			if fl.flushNow() != nil {
				return nil
			}
		case resp, ok := <-events:
			if !ok {
				fl.flushNow()
				return nil
			}
			if resp.Err != nil {
				// Compacted or too slow: the client re-lists on 410.
				ww.sendObject(watch.Error, toStatus(apierrors.NewResourceExpired(fmt.Sprintf("watch ended: %v", resp.Err))))
				fl.flushNow()
				return nil
			}
			for _, ev := range resp.Events {
				last = ev.Revision()
				if err := ww.sendStoreEvent(ev, o); err != nil {
					ww.sendObject(watch.Error, toStatus(apierrors.NewInternalError(err)))
					fl.flushNow()
					return nil
				}
			}
			if fl.written() != nil {
				return nil
			}
		}
	}
}

// flushPacer flushes a watch stream at most once per interval while events
// keep coming; see Config.WatchFlushInterval. It belongs to the watch's
// goroutine.
type flushPacer struct {
	ww       *watchWriter
	interval time.Duration
	last     time.Time   // of the last flush
	timer    *time.Timer // armed while a flush is pending; nil before the first
	pending  bool
}

func newFlushPacer(ww *watchWriter, interval time.Duration) *flushPacer {
	return &flushPacer{ww: ww, interval: interval}
}

// written is called after events were written: it flushes them at once
// unless the last flush was under the interval ago, in which case the
// flush is left to the timer whose channel due returns.
func (f *flushPacer) written() error {
	if f.pending {
		return nil // the armed timer flushes these too
	}
	wait := f.interval - time.Since(f.last)
	if f.interval <= 0 || wait <= 0 {
		return f.flushNow()
	}
	if f.timer == nil {
		f.timer = time.NewTimer(wait)
	} else {
		f.timer.Reset(wait)
	}
	f.pending = true
	return nil
}

// due returns the channel of the pending flush, or nil when none is.
func (f *flushPacer) due() <-chan time.Time {
	if !f.pending {
		return nil
	}
	return f.timer.C
}

// flushNow flushes what was written and disarms the timer.
func (f *flushPacer) flushNow() error {
	if f.pending {
		f.timer.Stop()
		f.pending = false
	}
	f.last = time.Now()
	return f.ww.flush()
}

func (f *flushPacer) stop() {
	if f.timer != nil {
		f.timer.Stop()
	}
}

// translate turns a store event into the watch event a client of these
// selectors sees: an object leaving the selection is DELETED, one entering
// it ADDED. It returns a nil object for events the client does not see.
func (q *request) translate(ev store.Event, o listOptions) (watch.EventType, runtime.Object, error) {
	var cur, prev runtime.Object
	var err error
	if ev.Type == store.EventPut {
		if cur, err = q.res.decode(ev.KV); err != nil {
			return "", nil, err
		}
	}
	if ev.PrevKV != nil {
		if prev, err = q.res.decode(*ev.PrevKV); err != nil {
			return "", nil, err
		}
	}
	curOK := cur != nil && q.res.matches(cur, o)
	prevOK := prev != nil && q.res.matches(prev, o)
	switch {
	case ev.Type == store.EventDelete:
		if !prevOK {
			return "", nil, nil
		}
		// The deleted object at the revision of its deletion.
		m, _ := meta.Accessor(prev)
		m.SetResourceVersion(strconv.FormatInt(ev.Revision(), 10))
		return watch.Deleted, prev, nil
	case curOK && prevOK:
		return watch.Modified, cur, nil
	case curOK:
		return watch.Added, cur, nil
	case prevOK:
		return watch.Deleted, cur, nil
	}
	return "", nil, nil
}

// bookmark returns an object of the resource carrying only rev.
func (q *request) bookmark(rev int64) runtime.Object {
	obj := q.res.New()
	obj.GetObjectKind().SetGroupVersionKind(q.res.gvk)
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.FormatInt(rev, 10))
	return obj
}
