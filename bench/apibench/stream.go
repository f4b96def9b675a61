package apibench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The memory benchmark reads lists and watches as raw HTTP streams,
// counting what it needs and discarding the rest as it arrives, so that
// it holds at most one object at a time: decoding 200 MB lists whole would
// make the benchmark compete with the hub it measures for memory.

// Media types the memory benchmark asks for.
const (
	acceptJSON     = "application/json"
	acceptProtobuf = "application/vnd.kubernetes.protobuf"
	// acceptTable is what kubectl get sends.
	acceptTable = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)

// protoMagic starts every Kubernetes protobuf message: runtime.Unknown
// follows it.
var protoMagic = []byte("k8s\x00")

// runtime.Unknown's field that holds the encoded object; lists' fields
// for their ListMeta and their items (a Table's rows are JSON only here).
const (
	unknownRawField  protowire.Number = 2
	listMetaField    protowire.Number = 1
	listItemsField   protowire.Number = 2
	watchTypeField   protowire.Number = 1
	maxListMetaBytes                  = 1 << 20
	maxErrorBody                      = 4 << 10
)

// configMapsPath returns the URL path of the namespace's ConfigMaps.
func configMapsPath(namespace string) string {
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/configmaps"
}

// countingReader counts the bytes read through it and notes when the
// first arrived. It is used by one goroutine, but n may be read by others.
type countingReader struct {
	r     io.Reader
	n     atomic.Uint64
	first time.Time
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && c.first.IsZero() {
		c.first = time.Now()
	}
	c.n.Add(uint64(n))
	return n, err
}

// streamList lists the namespace's ConfigMaps through hc from host,
// accepting accept, in pages of limit unless it is 0, and reads every page
// as a stream.
func streamList(ctx context.Context, hc *http.Client, host, namespace, accept string, limit int) StreamList {
	l := StreamList{Accept: accept, Limit: limit}
	cont := ""
	for {
		q := url.Values{}
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit))
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		start := time.Now()
		p, err := streamPage(ctx, hc, host+configMapsPath(namespace)+"?"+q.Encode(), accept)
		if l.Requests == 0 && !p.first.IsZero() {
			l.FirstByte = p.first.Sub(start)
		}
		l.Requests++
		l.Items += p.items
		l.BodyBytes += p.bytes
		if err != nil {
			l.Error = err.Error()
			return l
		}
		if p.cont == "" {
			return l
		}
		if limit == 0 {
			l.Error = "unpaged list returned a continue token"
			return l
		}
		cont = p.cont
	}
}

// page is what streamPage read of one page of a list.
type page struct {
	items int    // items, or Table rows
	cont  string // the continue token
	bytes uint64 // of the body
	first time.Time
}

// streamPage GETs one page of a list and reads it as a stream.
func streamPage(ctx context.Context, hc *http.Client, u, accept string) (page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return page{}, err
	}
	req.Header.Set("Accept", accept)
	resp, err := hc.Do(req)
	if err != nil {
		return page{}, fmt.Errorf("list: %w", err)
	}
	defer resp.Body.Close()
	body := &countingReader{r: resp.Body}
	var p page
	err = readPage(resp, body, accept, &p)
	if err == nil {
		if _, err = io.Copy(io.Discard, body); err != nil {
			err = fmt.Errorf("read list: %w", err)
		}
	}
	p.bytes, p.first = body.n.Load(), body.first
	return p, err
}

// readPage reads the items and continue token of resp's body, read
// through body, into p.
func readPage(resp *http.Response, body io.Reader, accept string, p *page) error {
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
		return fmt.Errorf("list: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	var err error
	ct := resp.Header.Get("Content-Type")
	switch {
	case accept == acceptTable && !strings.Contains(ct, "as=Table"):
		err = fmt.Errorf("list as Table: hub answered %q", ct)
	case strings.HasPrefix(ct, acceptProtobuf):
		p.items, p.cont, err = readProtoList(body)
	case strings.HasPrefix(ct, acceptJSON):
		p.items, p.cont, err = readJSONList(body)
	default:
		err = fmt.Errorf("list: unexpected Content-Type %q", ct)
	}
	return err
}

// readJSONList reads a JSON list, or Table, from r, one item or row at a
// time, and returns how many it held and its continue token. It reads no
// further than the list's closing brace.
func readJSONList(r io.Reader) (items int, cont string, err error) {
	d := json.NewDecoder(r)
	if err := expectDelim(d, '{'); err != nil {
		return 0, "", err
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return items, cont, fmt.Errorf("read list: %w", err)
		}
		switch key, _ := tok.(string); key {
		case "metadata":
			var lm metav1.ListMeta
			if err := d.Decode(&lm); err != nil {
				return items, cont, fmt.Errorf("read list metadata: %w", err)
			}
			cont = lm.Continue
		case "items", "rows":
			tok, err := d.Token()
			if err != nil {
				return items, cont, fmt.Errorf("read list %s: %w", key, err)
			}
			if tok == nil { // null: none
				continue
			}
			if tok != json.Delim('[') {
				return items, cont, fmt.Errorf("read list %s: got %v, want an array", key, tok)
			}
			for d.More() {
				var item json.RawMessage // one object at a time
				if err := d.Decode(&item); err != nil {
					return items, cont, fmt.Errorf("read list item %d: %w", items, err)
				}
				items++
			}
			if err := expectDelim(d, ']'); err != nil {
				return items, cont, err
			}
		default:
			var skip json.RawMessage
			if err := d.Decode(&skip); err != nil {
				return items, cont, fmt.Errorf("read list field %q: %w", key, err)
			}
		}
	}
	return items, cont, expectDelim(d, '}')
}

func expectDelim(d *json.Decoder, want json.Delim) error {
	tok, err := d.Token()
	if err != nil {
		return fmt.Errorf("read list: %w", err)
	}
	if tok != want {
		return fmt.Errorf("read list: got %v, want %v", tok, want)
	}
	return nil
}

// readProtoList reads a Kubernetes protobuf list from r, skipping over its
// items without decoding them, and returns how many it held and its
// continue token.
func readProtoList(r io.Reader) (items int, cont string, err error) {
	br := &protoReader{r: bufio.NewReaderSize(r, 32<<10), left: -1}
	magic := make([]byte, len(protoMagic))
	if _, err := io.ReadFull(br.r, magic); err != nil || !bytes.Equal(magic, protoMagic) {
		return 0, "", fmt.Errorf("read list: no protobuf magic (%v)", err)
	}
	// runtime.Unknown: the list is its raw field, the other fields are
	// small.
	seen := false
	for {
		num, n, err := br.field()
		if err == io.EOF && seen {
			return items, cont, nil
		}
		if err == io.EOF {
			return items, cont, errors.New("read list: no list in the protobuf message")
		}
		if err != nil {
			return items, cont, err
		}
		if num != unknownRawField {
			if err := br.skip(n); err != nil {
				return items, cont, err
			}
			continue
		}
		seen = true
		list := &protoReader{r: br.r, left: int64(n)}
		for list.left > 0 {
			num, n, err := list.field()
			if err != nil {
				return items, cont, err
			}
			switch num {
			case listMetaField:
				if n > maxListMetaBytes {
					return items, cont, fmt.Errorf("read list: metadata of %d bytes", n)
				}
				b := make([]byte, n)
				if err := list.read(b); err != nil {
					return items, cont, err
				}
				var lm metav1.ListMeta
				if err := lm.Unmarshal(b); err != nil {
					return items, cont, fmt.Errorf("read list metadata: %w", err)
				}
				cont = lm.Continue
			case listItemsField:
				items++
				if err := list.skip(n); err != nil {
					return items, cont, err
				}
			default:
				if err := list.skip(n); err != nil {
					return items, cont, err
				}
			}
		}
	}
}

// protoReader reads length-delimited protobuf fields from a stream, at
// most left bytes of it unless left is negative.
type protoReader struct {
	r    *bufio.Reader
	left int64
}

// field reads a field's tag and length. Only length-delimited fields are
// expected: every field of Unknown and of a list is. At the end of the
// stream (with left negative) it returns io.EOF.
func (p *protoReader) field() (protowire.Number, uint64, error) {
	tag, err := p.uvarint()
	if err != nil {
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(tag)
	if typ != protowire.BytesType {
		return 0, 0, fmt.Errorf("read list: field %d has wire type %d, want length-delimited", num, typ)
	}
	n, err := p.uvarint()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && p.left >= 0 && n > uint64(p.left) {
		err = fmt.Errorf("read list: field %d of %d bytes overruns its message", num, n)
	}
	return num, n, err
}

func (p *protoReader) uvarint() (uint64, error) {
	if p.left == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	c := &byteCounter{r: p.r}
	v, err := binary.ReadUvarint(c)
	if p.left >= 0 {
		p.left -= c.n
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil && err != io.EOF {
		return 0, fmt.Errorf("read list: %w", err)
	}
	return v, err
}

func (p *protoReader) skip(n uint64) error {
	if _, err := io.CopyN(io.Discard, p.r, int64(n)); err != nil {
		return fmt.Errorf("read list: %w", noEOF(err))
	}
	p.consumed(n)
	return nil
}

func (p *protoReader) read(b []byte) error {
	if _, err := io.ReadFull(p.r, b); err != nil {
		return fmt.Errorf("read list: %w", noEOF(err))
	}
	p.consumed(uint64(len(b)))
	return nil
}

func (p *protoReader) consumed(n uint64) {
	if p.left >= 0 {
		p.left -= int64(n)
	}
}

// byteCounter counts the bytes a varint took.
type byteCounter struct {
	r *bufio.Reader
	n int64
}

func (c *byteCounter) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// watchHead is how much of each watch event's start is kept to read its
// type and, for an error, its message.
const watchHead = 512

// streamWatch is one watch of the namespace's ConfigMaps read as a
// stream. run owns res until it returns; added may be read at any time.
type streamWatch struct {
	protobuf bool
	body     io.ReadCloser
	counter  *countingReader
	added    atomic.Int64
	done     chan struct{} // closed when run returns
	res      StreamWatch
}

// openWatch opens a watch of the namespace's ConfigMaps from
// resourceVersion rv, in protobuf or JSON, without bookmarks: every event
// of a run that only creates is an ADDED. Call run next.
func openWatch(ctx context.Context, hc *http.Client, host, namespace, rv string, protobuf bool) (*streamWatch, error) {
	q := url.Values{"watch": {"true"}, "resourceVersion": {rv}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+configMapsPath(namespace)+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	w := &streamWatch{protobuf: protobuf, done: make(chan struct{}), res: StreamWatch{Encoding: "json"}}
	req.Header.Set("Accept", acceptJSON)
	if protobuf {
		req.Header.Set("Accept", acceptProtobuf)
		w.res.Encoding = "protobuf"
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("watch configmaps: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		return nil, fmt.Errorf("watch configmaps: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	w.body = resp.Body
	w.counter = &countingReader{r: resp.Body}
	return w, nil
}

// run reads events until the watch ends, as it does when ctx ends.
func (w *streamWatch) run(ctx context.Context) {
	defer close(w.done)
	defer w.body.Close()
	br := bufio.NewReaderSize(w.counter, 64<<10)
	var err error
	if w.protobuf {
		err = w.readProtobuf(br)
	} else {
		err = w.readJSON(br)
	}
	w.res.Added = int(w.added.Load())
	w.res.Bytes = w.counter.n.Load()
	if ctx.Err() == nil && w.res.Error == "" {
		if err == nil || err == io.EOF {
			err = errors.New("hub ended the watch")
		}
		w.res.Error = fmt.Sprintf("after %d events: %v", w.res.Added+w.res.Other, err)
	}
}

// event counts one event of type typ; head is its start.
func (w *streamWatch) event(typ string, head []byte) {
	switch typ {
	case "ADDED":
		w.added.Add(1)
		return
	case "ERROR":
		if w.res.Error == "" {
			w.res.Error = "error event: " + string(bytes.ToValidUTF8(head, nil))
		}
	}
	w.res.Other++
}

// readJSON reads JSON events, one per line.
func (w *streamWatch) readJSON(br *bufio.Reader) error {
	head := make([]byte, 0, watchHead)
	atStart := true
	for {
		chunk, err := br.ReadSlice('\n')
		if atStart && len(chunk) > 0 {
			head = append(head[:0], chunk[:min(len(chunk), watchHead)]...)
			atStart = false
		}
		switch err {
		case nil:
			w.event(jsonEventType(head), head)
			atStart = true
		case bufio.ErrBufferFull:
		default:
			return err
		}
	}
}

// jsonEventType returns the type of a JSON watch event from its start,
// `{"type":"ADDED",...`, or "".
func jsonEventType(head []byte) string {
	rest, ok := bytes.CutPrefix(head, []byte(`{"type":"`))
	if !ok {
		return ""
	}
	typ, _, ok := bytes.Cut(rest, []byte(`"`))
	if !ok {
		return ""
	}
	return string(typ)
}

// readProtobuf reads length-prefixed protobuf events.
func (w *streamWatch) readProtobuf(br *bufio.Reader) error {
	var size [4]byte
	head := make([]byte, watchHead)
	for {
		if _, err := io.ReadFull(br, size[:]); err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint32(size[:]))
		h := head[:min(n, watchHead)]
		if _, err := io.ReadFull(br, h); err != nil {
			return noEOF(err)
		}
		if _, err := io.CopyN(io.Discard, br, n-int64(len(h))); err != nil {
			return noEOF(err)
		}
		w.event(protoEventType(h), nil)
	}
}

// protoEventType returns the type of a protobuf watch event from its
// start, or "". Kubernetes frames events as bare WatchEvent messages (its
// stream serializer is the raw one, without the magic and Unknown that
// wrap objects), whose type is the first field.
func protoEventType(head []byte) string {
	num, typ, n := protowire.ConsumeTag(head)
	if n < 0 || num != watchTypeField || typ != protowire.BytesType {
		return ""
	}
	s, n := protowire.ConsumeBytes(head[n:])
	if n < 0 {
		return ""
	}
	return string(s)
}
