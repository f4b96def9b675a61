package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
// object per line, or length-prefixed protobuf WatchEvents.
type watchWriter struct {
	w       http.ResponseWriter
	flusher *http.ResponseController
	out     output
	q       *request
	first   bool // no Table columns sent yet
}

func (ww *watchWriter) send(typ watch.EventType, obj runtime.Object) error {
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
	gv := obj.GetObjectKind().GroupVersionKind().GroupVersion()
	if err := codecs.EncoderForVersion(ww.out.info.Serializer, gvOrDefault(obj, gv)).Encode(obj, &raw); err != nil {
		return err
	}
	if ww.out.info.MediaType == runtime.ContentTypeJSON {
		line, err := json.Marshal(struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}{typ, bytes.TrimSpace(raw.Bytes())})
		if err != nil {
			return err
		}
		line = append(line, '\n')
		if _, err := ww.w.Write(line); err != nil {
			return err
		}
	} else {
		stream := ww.out.info.StreamSerializer
		if stream == nil {
			return fmt.Errorf("no stream serializer for %s", ww.out.info.MediaType)
		}
		ev := &metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw.Bytes()}}
		var buf bytes.Buffer
		if err := codecs.EncoderForVersion(stream.Serializer, schema.GroupVersion{Version: "v1"}).Encode(ev, &buf); err != nil {
			return err
		}
		fw := stream.Framer.NewFrameWriter(ww.w)
		if _, err := fw.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	return ww.flusher.Flush()
}

func (q *request) watch() error {
	o, err := q.parseListOptions()
	if err != nil {
		return err
	}
	out, err := negotiate(q.r, true)
	if err != nil {
		return err
	}
	if out.info.MediaType == "application/yaml" {
		out.info = mediaInfo(runtime.ContentTypeJSON)
	}
	// The controller reaches through wrappers (Unwrap) to the flusher.
	flusher := http.NewResponseController(q.w)
	ctx, stop := context.WithCancel(q.ctx())
	defer stop()
	go func(done <-chan struct{}) {
		select {
		case <-q.s.stop:
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
	var initial []runtime.Object
	if o.rv == "" || o.rv == "0" || o.initialEvent {
		// Start from the current state: ADDED for every object, then changes.
		lo := o
		lo.limit, lo.cont, lo.rv, lo.rvMatch = 0, nil, "", ""
		list, err := q.s.listObjects(q.r, q.res, q.ri.namespace, lo)
		if err != nil {
			return err
		}
		lm, _ := meta.ListAccessor(list)
		from, _ = strconv.ParseInt(lm.GetResourceVersion(), 10, 64)
		if initial, err = meta.ExtractList(list); err != nil {
			return apierrors.NewInternalError(err)
		}
	} else {
		from, _ = strconv.ParseInt(o.rv, 10, 64)
	}
	events, err := q.s.store.Watch(ctx, q.res.listPrefix(q.ri.namespace), from)
	ct := out.info.MediaType
	if out.table {
		ct += ";as=Table;v=v1;g=meta.k8s.io"
	}
	q.w.Header().Set("Content-Type", ct)
	ww := &watchWriter{w: q.w, flusher: flusher, out: out, q: q, first: true}
	if err != nil {
		// Upstream answers a watch from a compacted revision with 200 and
		// an ERROR event carrying 410 Gone, which reflectors act on.
		if errors.Is(err, store.ErrCompacted) {
			q.w.WriteHeader(http.StatusOK)
			ww.send(watch.Error, toStatus(apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d", from))))
			return nil
		}
		return storeError(err, q.res.gr, "")
	}
	q.w.WriteHeader(http.StatusOK)
	if err := flusher.Flush(); err != nil {
		return nil // the connection cannot stream: nothing more to say on it
	}
	for _, obj := range initial {
		if err := ww.send(watch.Added, obj); err != nil {
			q.s.log.Debug("watch send", "err", err)
			return nil
		}
	}
	if o.initialEvent {
		bm := q.bookmark(from)
		bm.(metav1.Object).SetAnnotations(map[string]string{"k8s.io/initial-events-end": "true"})
		if err := ww.send(watch.Bookmark, bm); err != nil {
			q.s.log.Debug("watch send", "err", err)
			return nil
		}
	}
	ticker := time.NewTicker(q.s.cfg.BookmarkInterval)
	defer ticker.Stop()
	last := from
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if o.bookmarks {
				if ww.send(watch.Bookmark, q.bookmark(last)) != nil {
					return nil
				}
			}
		case resp, ok := <-events:
			if !ok {
				return nil
			}
			if resp.Err != nil {
				// Compacted or too slow: the client re-lists on 410.
				ww.send(watch.Error, toStatus(apierrors.NewResourceExpired(fmt.Sprintf("watch ended: %v", resp.Err))))
				return nil
			}
			for _, ev := range resp.Events {
				last = ev.Revision()
				typ, obj, err := q.translate(ev, o)
				if err != nil {
					ww.send(watch.Error, toStatus(apierrors.NewInternalError(err)))
					return nil
				}
				if obj == nil {
					continue
				}
				if ww.send(typ, obj) != nil {
					return nil
				}
			}
		}
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
