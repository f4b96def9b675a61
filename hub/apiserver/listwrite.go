package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// A list response is written an item at a time as the store is read, so
// that it costs a bounded buffer whatever the size of the list, as
// upstream's streaming encoders do, and byte for byte as the serializers
// would write the whole list: the envelope (kind, apiVersion, metadata,
// Table columns) is the serializer's encoding of the list without items,
// and each item is encoded as the serializer encodes it inside the list.
// Protobuf needs the size of the list before its items, and a limited list
// its continue token in its metadata, which comes first: those read the
// list twice, the first time without decoding unless selectors need it.

// listForm is the negotiated form of a list response.
type listForm struct {
	out output
	// empty returns the response without items (with an empty items or
	// rows list), whose encoding is the envelope.
	empty func(lm metav1.ListMeta) runtime.Object
	// item appends one item: the JSON of the object, Table row or
	// metadata (YAML forms convert it), or its protobuf message.
	item func(b []byte, it *listItem) ([]byte, error)
	// size returns the length of an item's protobuf message.
	size func(it *listItem) (int, error)
	// key names the items in the envelope: "items" or "rows".
	key string
}

func (f *listForm) proto() bool { return f.out.info.MediaType == runtime.ContentTypeProtobuf }
func (f *listForm) yaml() bool  { return f.out.info.MediaType == runtime.ContentTypeYAML }

// listForm returns the form of the request's list response in out.
func (q *request) listForm(out output) (*listForm, error) {
	res := q.res
	f := &listForm{out: out, key: "items"}
	switch {
	case out.table:
		include, err := q.includeObject()
		if err != nil {
			return nil, err
		}
		columns := res.columns()
		f.key = "rows"
		f.empty = func(lm metav1.ListMeta) runtime.Object {
			return &metav1.Table{
				TypeMeta:          metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"},
				ListMeta:          lm,
				ColumnDefinitions: columns,
				Rows:              []metav1.TableRow{},
			}
		}
		f.item = func(b []byte, it *listItem) ([]byte, error) {
			obj, err := it.object(res)
			if err != nil {
				return nil, err
			}
			return appendJSON(b, q.tableRow(obj, include))
		}
	case out.partial:
		f.empty = func(lm metav1.ListMeta) runtime.Object {
			return &metav1.PartialObjectMetadataList{
				TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
				ListMeta: lm,
				Items:    []metav1.PartialObjectMetadata{},
			}
		}
		if f.proto() {
			f.item, f.size = protoItems(true, nil)
			break
		}
		f.item = func(b []byte, it *listItem) ([]byte, error) {
			obj, err := it.object(res)
			if err != nil {
				return nil, err
			}
			return appendJSON(b, partialMetadata(obj))
		}
	default:
		f.empty = func(lm metav1.ListMeta) runtime.Object {
			list := res.NewList()
			meta.SetList(list, []runtime.Object{})
			la, _ := meta.ListAccessor(list)
			la.SetResourceVersion(lm.ResourceVersion)
			la.SetContinue(lm.Continue)
			la.SetRemainingItemCount(lm.RemainingItemCount)
			list.GetObjectKind().SetGroupVersionKind(res.GroupVersion.WithKind(res.Kind + "List"))
			return list
		}
		if f.proto() {
			f.item, f.size = protoItems(false, res)
			break
		}
		f.item = func(b []byte, it *listItem) ([]byte, error) {
			obj, err := it.object(res)
			if err != nil {
				return nil, err
			}
			return appendJSON(b, obj)
		}
	}
	return f, nil
}

// protoItems returns the item and size functions of a protobuf list whose
// items are made from their stored bytes (see protoItem): the whole
// objects, or with metaOnly their metadata, as PartialObjectMetadata.
// The whole objects of a resource stored at another version (res's
// Conversion) are made from their encoding in the resource's version
// instead (metadata is the same in every version).
func protoItems(metaOnly bool, res *resourceInfo) (item func([]byte, *listItem) ([]byte, error), size func(*listItem) (int, error)) {
	parse := func(it *listItem) (protoItem, error) {
		rv := strconv.FormatInt(it.kv.ModRevision, 10)
		if metaOnly || res == nil || res.Conversion == nil && !res.DefaultOnRead {
			return newProtoItem(it.kv.Value, rv)
		}
		obj, err := it.object(res)
		if err != nil {
			return protoItem{}, err
		}
		var buf bytes.Buffer
		if err := res.codec.storage.Encode(obj, &buf); err != nil {
			return protoItem{}, err
		}
		return newProtoItem(buf.Bytes(), rv)
	}
	item = func(b []byte, it *listItem) ([]byte, error) {
		p, err := parse(it)
		switch {
		case err != nil:
			return nil, err
		case metaOnly:
			return p.appendMeta(b), nil
		}
		return p.appendTo(b), nil
	}
	size = func(it *listItem) (int, error) {
		p, err := parse(it)
		if metaOnly {
			return p.metaField(), err
		}
		return p.size(), err
	}
	return item, size
}

// appendJSON appends v as encoding/json writes it, as the serializers do.
func appendJSON(b []byte, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}

// listSource yields the items of a list response: a scan of the store, or
// the objects a delete of a collection removed.
type listSource interface {
	// each yields the items in order, the same ones every time.
	each(ctx context.Context, yield func(*listItem) error) error
	// limited reports whether the list's metadata is known only after a
	// complete pass of each.
	limited() bool
	// listMeta returns the list's metadata (after a pass, if limited).
	listMeta() metav1.ListMeta
}

func (sc *listScan) limited() bool { return sc.o.limit > 0 }

func (sc *listScan) listMeta() metav1.ListMeta {
	return metav1.ListMeta{ResourceVersion: strconv.FormatInt(sc.rev, 10), Continue: sc.continueToken(), RemainingItemCount: sc.remainingItemCount()}
}

// itemList is a list response held in memory, at revision rev.
type itemList struct {
	rev   int64
	items []listItem
}

func (l *itemList) each(ctx context.Context, yield func(*listItem) error) error {
	for i := range l.items {
		it := l.items[i] // a copy: yield's decoding stays with this pass
		if err := yield(&it); err != nil {
			return err
		}
	}
	return nil
}

func (l *itemList) limited() bool { return false }

func (l *itemList) listMeta() metav1.ListMeta {
	return metav1.ListMeta{ResourceVersion: strconv.FormatInt(l.rev, 10)}
}

// serveList writes the list src yields in form f: 200 and the list, or
// the error that kept it from starting. An error after the list started
// ends the response short, which the client's decoder reports: the list's
// closing bytes come last.
func (q *request) serveList(src listSource, f *listForm) error {
	ctx := q.ctx()
	var itemBytes int
	if f.proto() || src.limited() {
		err := src.each(ctx, func(it *listItem) error {
			if f.size == nil {
				return nil
			}
			n, err := f.size(it)
			itemBytes += 1 + uvarintLen(uint64(n)) + n
			return err
		})
		if err != nil {
			return asInternal(err)
		}
	}
	lm := src.listMeta()
	var env bytes.Buffer
	empty := f.empty(lm)
	if !f.proto() {
		gv := empty.GetObjectKind().GroupVersionKind().GroupVersion()
		if err := q.s.encoderFor(f.out.info.Serializer, gv).Encode(empty, &env); err != nil {
			return apierrors.NewInternalError(err)
		}
	}
	q.w.Header().Set("Content-Type", f.out.info.MediaType+f.out.asParam())
	q.w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(q.w, 32<<10)
	var err error
	switch {
	case f.proto():
		err = writeProtoList(ctx, bw, src, f, empty, lm, itemBytes)
	case f.yaml():
		err = writeYAMLList(ctx, bw, src, f, env.Bytes())
	default:
		err = writeJSONList(ctx, bw, src, f, env.Bytes())
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		q.s.log.Warn("list response ended early", "path", q.r.URL.Path, "err", err)
	}
	return nil
}

// asInternal returns err as it is when it is an API error, else as a 500.
func asInternal(err error) error {
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	return apierrors.NewInternalError(err)
}

// writeJSONList writes env, the JSON of the list without items, with the
// items where its empty items list is.
func writeJSONList(ctx context.Context, w io.Writer, sc listSource, f *listForm, env []byte) error {
	i := bytes.LastIndex(env, []byte("[]"))
	if i < 0 {
		return fmt.Errorf("list envelope %.100q has no empty %s", env, f.key)
	}
	if _, err := w.Write(env[:i+1]); err != nil {
		return err
	}
	var buf []byte
	n := 0
	err := sc.each(ctx, func(it *listItem) error {
		buf = buf[:0]
		if n > 0 {
			buf = append(buf, ',')
		}
		n++
		var err error
		if buf, err = f.item(buf, it); err != nil {
			return err
		}
		_, err = w.Write(buf)
		return err
	})
	if err != nil {
		return err
	}
	_, err = w.Write(env[i+1:])
	return err
}

// writeYAMLList writes env, the YAML of the list without items, with the
// items as a block sequence where its "KEY: []" line is, as the YAML
// serializer writes a list's JSON converted whole.
func writeYAMLList(ctx context.Context, w io.Writer, sc listSource, f *listForm, env []byte) error {
	line := []byte(f.key + ": []\n")
	i := bytes.Index(env, line)
	for i > 0 && env[i-1] != '\n' {
		j := bytes.Index(env[i+1:], line)
		if j < 0 {
			i = -1
			break
		}
		i += 1 + j
	}
	if i < 0 {
		return fmt.Errorf("list envelope %.100q has no empty %s", env, f.key)
	}
	if _, err := w.Write(env[:i]); err != nil {
		return err
	}
	n := 0
	var buf []byte
	err := sc.each(ctx, func(it *listItem) error {
		if n == 0 {
			if _, err := io.WriteString(w, f.key+":\n"); err != nil {
				return err
			}
		}
		n++
		var err error
		if buf, err = f.item(buf[:0], it); err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(buf)
		if err != nil {
			return err
		}
		_, err = w.Write(indentYAMLItem(y))
		return err
	})
	if err != nil {
		return err
	}
	rest := env[i+len(line):]
	if n == 0 {
		rest = env[i:]
	}
	_, err = w.Write(rest)
	return err
}

// indentYAMLItem makes the YAML of one object an item of a block sequence
// at the top level: "- " before its first line, two spaces before the
// others but empty ones.
func indentYAMLItem(y []byte) []byte {
	out := make([]byte, 0, len(y)+len(y)/8+8)
	first := true
	for len(y) > 0 {
		l := y
		if i := bytes.IndexByte(y, '\n'); i >= 0 {
			l = y[:i+1]
		}
		y = y[len(l):]
		switch {
		case first:
			out = append(out, "- "...)
		case len(l) > 1:
			out = append(out, "  "...)
		}
		first = false
		out = append(out, l...)
	}
	return out
}

// writeProtoList writes the protobuf list of itemBytes of items, as the
// protobuf serializer writes empty with its items: the magic, then a
// runtime.Unknown whose raw bytes are the list message, its metadata then
// its items.
func writeProtoList(ctx context.Context, w io.Writer, sc listSource, f *listForm, empty runtime.Object, lm metav1.ListMeta, itemBytes int) error {
	lmBytes, err := lm.Marshal()
	if err != nil {
		return err
	}
	gvk := empty.GetObjectKind().GroupVersionKind()
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}}
	size := 1 + uvarintLen(uint64(len(lmBytes))) + len(lmBytes) + itemBytes
	if _, err := w.Write(protoMagic); err != nil {
		return err
	}
	_, err = unk.MarshalToWriter(w, size, func(w io.Writer) (int, error) {
		head := binary.AppendUvarint([]byte{tagMetadata}, uint64(len(lmBytes)))
		if _, err := w.Write(head); err != nil {
			return 0, err
		}
		if _, err := w.Write(lmBytes); err != nil {
			return 0, err
		}
		written := len(head) + len(lmBytes)
		var msg, buf []byte
		err := sc.each(ctx, func(it *listItem) error {
			var err error
			if msg, err = f.item(msg[:0], it); err != nil {
				return err
			}
			buf = binary.AppendUvarint(append(buf[:0], tagListItems), uint64(len(msg)))
			buf = append(buf, msg...)
			if written+len(buf) > size {
				return fmt.Errorf("list item %s goes past the list's size, %d bytes", it.kv.Key, size)
			}
			written += len(buf)
			_, err = w.Write(buf)
			return err
		})
		if err == nil && written != size {
			err = fmt.Errorf("list of %d bytes where its size said %d", written, size)
		}
		return written, err
	})
	return err
}

// includeObject returns the request's includeObject policy for Tables:
// Metadata unless asked.
func (q *request) includeObject() (metav1.IncludeObjectPolicy, error) {
	switch v := q.r.URL.Query().Get("includeObject"); v {
	case "":
		return metav1.IncludeMetadata, nil
	case string(metav1.IncludeNone), string(metav1.IncludeMetadata), string(metav1.IncludeObject):
		return metav1.IncludeObjectPolicy(v), nil
	}
	return "", apierrors.NewBadRequest("includeObject must be None, Metadata or Object")
}

// tableRow returns the Table row of obj.
func (q *request) tableRow(obj runtime.Object, include metav1.IncludeObjectPolicy) metav1.TableRow {
	row := metav1.TableRow{Cells: q.res.row(obj)}
	switch include {
	case metav1.IncludeMetadata:
		row.Object.Object = partialMetadata(obj)
	case metav1.IncludeObject:
		obj.GetObjectKind().SetGroupVersionKind(q.res.gvk)
		row.Object.Object = obj
	}
	return row
}

// notAcceptable is the 406 for an Accept header the server cannot meet.
func notAcceptable() error {
	return apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schemaGR0, "", "only application/json, application/yaml and application/vnd.kubernetes.protobuf are supported", 0, false)
}
