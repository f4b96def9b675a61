package imageshare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// maxContentRange bounds the Content-Range header Open reads.
const maxContentRange = 128

// Open reads the blob from byte off to its end, and returns the size of
// the whole blob, at most MaxBlob. A peer that pulls the blob from
// outside the site answers once it has it, or after its CommitWait. A
// peer that answers a range with the whole blob is read from off all the
// same. The caller closes the body; it reads until ctx ends.
func (b Blob) Open(ctx context.Context, off int64) (io.ReadCloser, int64, error) {
	if off < 0 {
		return nil, 0, fmt.Errorf("open %s at %d", b.d, off)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peerURL(b.p, b.kind, b.d), nil)
	if err != nil {
		return nil, 0, err
	}
	if off > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(off, 10)+"-")
	}
	resp, err := b.f.client(b.p).Do(req)
	if err != nil {
		return nil, 0, err
	}
	ok := false
	defer func() {
		if !ok {
			resp.Body.Close()
		}
	}()
	var size int64
	switch resp.StatusCode {
	case http.StatusOK:
		size = resp.ContentLength
		if size < 0 || size > b.f.cfg.MaxBlob || off > size {
			return nil, 0, &badBytesError{fmt.Sprintf("length %d of %s", size, b.d)}
		}
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			return nil, 0, fmt.Errorf("skip to %d of %s: %w", off, b.d, err)
		}
	case http.StatusPartialContent:
		start, end, total, err := parseContentRange(resp.Header.Get("Content-Range"))
		switch {
		case err != nil:
			return nil, 0, &badBytesError{fmt.Sprintf("range of %s: %v", b.d, err)}
		case start != off || end != total-1 || total > b.f.cfg.MaxBlob ||
			resp.ContentLength >= 0 && resp.ContentLength != total-off:
			return nil, 0, &badBytesError{fmt.Sprintf("bytes %d-%d/%d of %s, asked from %d", start, end, total, b.d, off)}
		}
		size = total
	default:
		return nil, 0, fmt.Errorf("status %s", resp.Status)
	}
	ok = true
	return &limitedBody{r: io.LimitReader(resp.Body, size-off), c: resp.Body}, size, nil
}

// limitedBody reads at most what the blob's size leaves.
type limitedBody struct {
	r io.Reader
	c io.Closer
}

func (l *limitedBody) Read(p []byte) (int, error) { return l.r.Read(p) }
func (l *limitedBody) Close() error               { return l.c.Close() }

// Errors of parseContentRange.
var errContentRange = errors.New("not a byte range of a known size")

// parseContentRange reads a Content-Range header of a 206 answer,
// "bytes <start>-<end>/<size>", at most maxContentRange bytes: it
// returns its numbers, with 0 <= start <= end < size.
func parseContentRange(h string) (start, end, size int64, err error) {
	if len(h) > maxContentRange {
		return 0, 0, 0, errContentRange
	}
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, 0, 0, errContentRange
	}
	rng, sz, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, errContentRange
	}
	s, e, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, 0, errContentRange
	}
	if start, err = parseUint(s); err != nil {
		return 0, 0, 0, err
	}
	if end, err = parseUint(e); err != nil {
		return 0, 0, 0, err
	}
	if size, err = parseUint(sz); err != nil {
		return 0, 0, 0, err
	}
	if start > end || end >= size {
		return 0, 0, 0, errContentRange
	}
	return start, end, size, nil
}

// parseUint reads a decimal number of digits only.
func parseUint(s string) (int64, error) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, errContentRange
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errContentRange
	}
	return n, nil
}
