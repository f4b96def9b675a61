package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A frame is
//
//	uvarint(len(body)) | type (1 byte) | flags (1 byte) | body
//
// where body is the message's fields, compressed with zstd when flagZstd
// is set. Both the frame and the body once decompressed are bounded by the
// reader's limit.

// DefaultMaxFrameSize bounds a frame, and its body once decompressed: room
// for the largest object the hub stores (1.5 MiB) with its envelope.
// Senders split what is larger (batches, inventories) over several frames.
const DefaultMaxFrameSize = 4 << 20

// CompressMin is the body size from which a Writer tries compression.
const CompressMin = 512

const flagZstd = 1 << 0

// FrameTooLargeError is returned by Reader.Read for a frame over the
// limit; the stream is then unusable and should be closed with CodeTooLarge.
type FrameTooLargeError struct {
	Size  uint64 // announced or decompressed size
	Limit int
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("sync frame of %d bytes is over the %d-byte limit", e.Size, e.Limit)
}

// ErrFrameTooLarge matches a *FrameTooLargeError with errors.Is.
var ErrFrameTooLarge = errors.New("sync frame too large")

func (e *FrameTooLargeError) Is(target error) bool { return target == ErrFrameTooLarge }

// Shared zstd coders: EncodeAll and DecodeAll are safe for concurrent use,
// and one of each for the process keeps a hub with thousands of sessions
// from holding thousands of coder windows. Each is made on first use.
var (
	decOnce sync.Once
	zstdDec *zstd.Decoder
	// encoders[0] is the hub's: zstd's default level, two at once, a
	// 1 MiB window, 3.8 MB of memory, for the large views it sends to many
	// nodes. encoders[1] is a node's (Writer.SetLean): the fastest level,
	// one at once, a 256 KiB window, 0.7 MB, for statuses and events.
	encoders [2]struct {
		once sync.Once
		enc  *zstd.Encoder
	}
)

// encoder returns the hub's encoder, or with lean a node's, made on its
// first use; the options are built then only, not at every frame.
func encoder(lean bool) *zstd.Encoder {
	i := 0
	if lean {
		i = 1
	}
	e := &encoders[i]
	e.once.Do(func() {
		opts := []zstd.EOption{
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithEncoderConcurrency(2),
			zstd.WithWindowSize(1 << 20),
			zstd.WithLowerEncoderMem(true),
		}
		if lean {
			opts = []zstd.EOption{
				zstd.WithEncoderLevel(zstd.SpeedFastest),
				zstd.WithEncoderConcurrency(1),
				zstd.WithWindowSize(256 << 10),
				zstd.WithLowerEncoderMem(true),
			}
		}
		var err error
		if e.enc, err = zstd.NewWriter(nil, opts...); err != nil {
			panic(fmt.Sprintf("wire: zstd encoder: %v", err)) // static options
		}
	})
	return e.enc
}

func decoder() *zstd.Decoder {
	decOnce.Do(func() {
		var err error
		zstdDec, err = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(2),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(DefaultMaxFrameSize),
			zstd.WithDecoderMaxWindow(1<<20))
		if err != nil {
			panic(fmt.Sprintf("wire: zstd decoder: %v", err))
		}
	})
	return zstdDec
}

// Writer writes frames to a stream. It is not safe for concurrent use.
type Writer struct {
	w        io.Writer
	max      int
	compress bool
	lean     bool
	buf      []byte
	n        int64
}

// NewWriter returns a writer of frames of at most DefaultMaxFrameSize to
// w, compressing bodies of CompressMin bytes or more when that saves.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, max: DefaultMaxFrameSize, compress: true}
}

// SetCompression turns compression on or off.
func (w *Writer) SetCompression(on bool) { w.compress = on }

// SetLean makes w compress with the process's lean encoder, which takes
// a fifth of the memory of the default one and compresses statuses and
// events a little less: for a node, whose agent must stay small.
func (w *Writer) SetLean() { w.lean = true }

// BytesWritten returns the bytes of frames written so far.
func (w *Writer) BytesWritten() int64 { return w.n }

// Write writes m as one frame. A message whose body is over the limit is
// not written: the caller splits it.
func (w *Writer) Write(m Message) error {
	var e enc
	m.appendTo(&e)
	body, flags := e.b, byte(0)
	if len(body) > w.max {
		return &FrameTooLargeError{Size: uint64(len(body)), Limit: w.max}
	}
	if w.compress && len(body) >= CompressMin {
		z := encoder(w.lean).EncodeAll(body, nil)
		if len(z) < len(body)-len(body)/8 { // only where it pays
			body, flags = z, flagZstd
		}
	}
	w.buf = binary.AppendUvarint(w.buf[:0], uint64(len(body)))
	w.buf = append(w.buf, byte(m.Type()), flags)
	w.buf = append(w.buf, body...)
	n, err := w.w.Write(w.buf)
	w.n += int64(n)
	if cap(w.buf) > 1<<20 {
		w.buf = nil // do not keep a large buffer past a large frame
	}
	if err != nil {
		return fmt.Errorf("write %v frame: %w", m.Type(), err)
	}
	return nil
}

// Reader reads frames from a stream. It is not safe for concurrent use.
type Reader struct {
	r   *bufio.Reader
	max int
	n   int64
	buf []byte
}

// NewReader returns a reader of frames from r of at most max bytes each
// (DefaultMaxFrameSize if max <= 0).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxFrameSize
	}
	return &Reader{r: bufio.NewReaderSize(r, readBufferSize), max: max}
}

// readBufferSize is a Reader's buffer. A frame is read whole whatever
// the buffer, which only saves reads of the stream for small frames; a
// hub holds one per node's stream, most of them idle, so it is small.
const readBufferSize = 4 << 10

// Rest returns the stream after the frames read so far, bytes the reader
// has buffered first: for a stream that turns from frames to raw bytes (a
// tunnel). Do not call Read after using it.
func (r *Reader) Rest() io.Reader { return r.r }

// BytesRead returns the bytes of frames read so far.
func (r *Reader) BytesRead() int64 { return r.n }

// Read reads and decodes the next frame. It returns io.EOF at a clean end
// of the stream between frames, a *FrameTooLargeError for a frame over the
// limit (without reading its body), and an error wrapping ErrMalformed for
// a frame that does not decode; after any error but io.EOF the stream is
// out of step and must be closed.
func (r *Reader) Read() (Message, error) {
	size, err := r.readSize()
	if err != nil {
		return nil, err
	}
	if size > uint64(r.max) {
		return nil, &FrameTooLargeError{Size: size, Limit: r.max}
	}
	var hdr [2]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		return nil, fmt.Errorf("read frame header: %w", unexpected(err))
	}
	if cap(r.buf) < int(size) {
		r.buf = make([]byte, size)
	}
	body := r.buf[:size]
	if _, err := io.ReadFull(r.r, body); err != nil {
		return nil, fmt.Errorf("read frame body: %w", unexpected(err))
	}
	r.n += int64(uvarintLen(size)) + 2 + int64(size)
	typ, flags := Type(hdr[0]), hdr[1]
	if flags&^flagZstd != 0 {
		return nil, fmt.Errorf("%w: unknown frame flags %#x", ErrMalformed, flags)
	}
	if flags&flagZstd != 0 {
		plain, err := decoder().DecodeAll(body, nil)
		if err != nil {
			if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
				return nil, &FrameTooLargeError{Size: uint64(len(plain)), Limit: r.max}
			}
			return nil, fmt.Errorf("%w: decompress %v frame: %v", ErrMalformed, typ, err)
		}
		if len(plain) > r.max {
			return nil, &FrameTooLargeError{Size: uint64(len(plain)), Limit: r.max}
		}
		body = plain
	}
	m, err := Unmarshal(typ, body)
	if cap(r.buf) > 1<<20 {
		r.buf = nil
	}
	return m, err
}

// readSize reads the frame length: io.EOF before its first byte is the
// clean end of the stream.
func (r *Reader) readSize() (uint64, error) {
	var v uint64
	for i := 0; ; i++ {
		c, err := r.r.ReadByte()
		if err != nil {
			if i == 0 && errors.Is(err, io.EOF) {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("read frame length: %w", unexpected(err))
		}
		if i == binary.MaxVarintLen64-1 && c > 1 || i >= binary.MaxVarintLen64 {
			return 0, fmt.Errorf("%w: frame length overflows", ErrMalformed)
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, nil
		}
	}
}

// unexpected turns an EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
