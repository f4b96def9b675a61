package imageshare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/outpost-mesh/outpost/edge/mesh"
)

// fakeFiles is a Files in memory.
type fakeFiles struct {
	mu    sync.Mutex
	blobs map[digest.Digest][]byte
	opens atomic.Int64
}

func (f *fakeFiles) put(b []byte) digest.Digest {
	d := digest.FromBytes(b)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blobs == nil {
		f.blobs = map[digest.Digest][]byte{}
	}
	f.blobs[d] = b
	return d
}

func (f *fakeFiles) OpenBlob(d digest.Digest) (io.ReadSeekCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.blobs[d]
	if !ok {
		return nil, fmt.Errorf("blob %s: %w", d, fs.ErrNotExist)
	}
	f.opens.Add(1)
	return readerAt{bytes.NewReader(b)}, nil
}

// startFilesPeer serves files, and no images, as node name.
func startFilesPeer(t *testing.T, ca *testCA, name string, files Files, pulling func(digest.Digest) bool) *testPeer {
	t.Helper()
	return startPeerWith(t, ca, name, &fakeContent{}, allowAll, pulling, files)
}

// A blob of the Files is served whole, by HEAD, and from a range; an
// absent one is 404.
func TestServerFiles(t *testing.T) {
	ca := newTestCA(t)
	files := &fakeFiles{}
	blob := bytes.Repeat([]byte("artifact "), 1000)
	d := files.put(blob)
	a := startFilesPeer(t, ca, "a", files, nil)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(ca.identity(t, "b"), "a")}}
	defer cl.CloseIdleConnections()
	url := "https://" + a.addr.String() + "/v2/x/blobs/"
	for _, tc := range []struct {
		method, path, rng string
		code              int
		body              []byte
		contentRange      string
	}{
		{"GET", d.String(), "", 200, blob, ""},
		{"HEAD", d.String(), "", 200, nil, ""},
		{"GET", d.String(), "bytes=8000-", 206, blob[8000:], fmt.Sprintf("bytes 8000-%d/%d", len(blob)-1, len(blob))},
		{"GET", digest.FromString("absent").String(), "", 404, nil, ""},
		{"GET", digest.FromString("absent").String(), "bytes=5-", 404, nil, ""},
	} {
		req, _ := http.NewRequest(tc.method, url+tc.path, nil)
		if tc.rng != "" {
			req.Header.Set("Range", tc.rng)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || tc.body != nil && !bytes.Equal(got, tc.body) || resp.Header.Get("Content-Range") != tc.contentRange {
			t.Errorf("%s %s %q = %d, %d bytes, range %q; want %d, %d bytes, range %q", tc.method, tc.path, tc.rng,
				resp.StatusCode, len(got), resp.Header.Get("Content-Range"), tc.code, len(tc.body), tc.contentRange)
		}
		if tc.code/100 == 2 && resp.Header.Get("Docker-Content-Digest") != d.String() {
			t.Errorf("%s %s: digest %q, want %s", tc.method, tc.path, resp.Header.Get("Docker-Content-Digest"), d)
		}
		if tc.method == "HEAD" && resp.ContentLength != int64(len(blob)) {
			t.Errorf("HEAD %s: length %d, want %d", tc.path, resp.ContentLength, len(blob))
		}
	}
}

// readAll has f fetch d from a peer through FetchBlob and Open, from
// byte off, checking it against want; it returns whether a peer served
// it.
func readAll(t *testing.T, f *Fetcher, d digest.Digest, off int64, want []byte) (bool, string) {
	t.Helper()
	var from string
	ok := f.FetchBlob(t.Context(), d, func(ctx context.Context, b Blob) error {
		body, size, err := b.Open(ctx, off)
		if err != nil {
			return err
		}
		defer body.Close()
		got, err := io.ReadAll(body)
		if err != nil {
			return err
		}
		if size != int64(len(want)) || !bytes.Equal(got, want[off:]) {
			return fmt.Errorf("%w: %d bytes of %d", ErrBadContent, len(got), size)
		}
		from = b.Peer()
		return nil
	})
	return ok, from
}

// FetchBlob takes a blob, from a byte on, from the peer that holds it;
// a peer that served bad bytes is skipped next time.
func TestFetchBlob(t *testing.T) {
	ca := newTestCA(t)
	blob := bytes.Repeat([]byte("firmware "), 5000)
	good := &fakeFiles{}
	d := good.put(blob)
	bad := &fakeFiles{}
	bad.put(blob)
	bad.blobs[d] = append([]byte("X"), blob[1:]...)
	a := startFilesPeer(t, ca, "a", bad, nil)
	b := startFilesPeer(t, ca, "b", good, nil)
	ann := &announcements{}
	f := newTestFetcher(t, ca, "c", func() []mesh.Peer { return []mesh.Peer{a.peer(), b.peer()} }, ann)
	for i, off := range []int64{0, 1234} {
		ok, from := readAll(t, f, d, off, blob)
		if !ok || from != "b" {
			t.Fatalf("fetch %d from %d: served %v by %q; want by b", i, off, ok, from)
		}
		f.Done(d)
	}
	// Once by the HEAD, once by the GET of the first fetch; not asked
	// again.
	if n := bad.opens.Load(); n != 2 {
		t.Errorf("the bad peer opened the blob %d times, want 2: asked and read once", n)
	}
	if s := ann.all(); len(s) != 0 {
		t.Errorf("announced %x, though a peer held the blob", s)
	}
	// None holds it: announced, and not served.
	other := digest.FromString("nobody has it")
	if ok, _ := readAll(t, f, other, 0, nil); ok {
		t.Fatalf("a blob no peer holds was served")
	}
	if !f.Pulling(other) {
		t.Errorf("not Pulling(%s) after no peer served it", other)
	}
	f.Done(other)
}

// A peer that pulls a file blob has a GET wait until its Files hold it;
// LowerPulling says whether to wait for it.
func TestFetchBlobWaitsForPuller(t *testing.T) {
	ca := newTestCA(t)
	blob := []byte("an artifact on its way from the hub")
	d := digest.FromBytes(blob)
	sum, _ := sha256Of(d)
	files := &fakeFiles{}
	var held atomic.Bool
	a := startFilesPeer(t, ca, "a", files, func(digest.Digest) bool { return !held.Load() })
	a.meta.Pulling = [][32]byte{sum}
	peers := func() []mesh.Peer { return []mesh.Peer{a.peer()} }
	f := newTestFetcher(t, ca, "b", peers, &announcements{})
	if !f.LowerPulling(d) {
		t.Errorf("LowerPulling(%s) false while a, of a lower name, says it pulls it", d)
	}
	if fz := newTestFetcher(t, ca, "0", peers, &announcements{}); fz.LowerPulling(d) {
		t.Errorf("LowerPulling(%s) true for node 0, of a lower name than a", d)
	}
	timer := time.AfterFunc(200*time.Millisecond, func() {
		files.put(blob)
		held.Store(true)
	})
	defer timer.Stop()
	if ok, from := readAll(t, f, d, 0, blob); !ok || from != "a" {
		t.Fatalf("served %v by %q; want by a once it holds it", ok, from)
	}
}

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		in               string
		start, end, size int64
		ok               bool
	}{
		{"bytes 0-9/10", 0, 9, 10, true},
		{"bytes 100-199/200", 100, 199, 200, true},
		{"bytes 5-4/10", 0, 0, 0, false},
		{"bytes 0-10/10", 0, 0, 0, false},
		{"bytes 0-9/*", 0, 0, 0, false},
		{"bytes */10", 0, 0, 0, false},
		{"bytes -1-9/10", 0, 0, 0, false},
		{"bytes +1-9/10", 0, 0, 0, false},
		{"items 0-9/10", 0, 0, 0, false},
		{"bytes 0-9/99999999999999999999", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		s, e, n, err := parseContentRange(tc.in)
		if (err == nil) != tc.ok || s != tc.start || e != tc.end || n != tc.size {
			t.Errorf("parseContentRange(%q) = %d, %d, %d, %v; want %d, %d, %d, ok %v", tc.in, s, e, n, err, tc.start, tc.end, tc.size, tc.ok)
		}
	}
}

// FuzzContentRange: whatever a peer says of its range, parseContentRange
// returns 0 <= start <= end < size, or an error, and reads no more than
// maxContentRange bytes.
func FuzzContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-9/10", "bytes 100-199/200", "bytes 5-4/10", "bytes */10", "bytes 0-9/*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		s, e, n, err := parseContentRange(h)
		if err != nil {
			if !errors.Is(err, errContentRange) {
				t.Fatalf("parseContentRange(%q): error %v is not errContentRange", h, err)
			}
			return
		}
		if len(h) > maxContentRange || s < 0 || s > e || e >= n {
			t.Fatalf("parseContentRange(%q) = %d, %d, %d", h, s, e, n)
		}
	})
}
