package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// After its TunnelReply, an exec or attach tunnel carries chunks, each
//
//	channel (1 byte) | uvarint(len(data)) | data
//
// with len(data) at most MaxChunk. A chunk of no data ends its channel
// (the end of stdin, a half-close). The hub sends ChanStdin and
// ChanResize; the node sends ChanStdout, ChanStderr and, last, one
// ChanExit chunk (see AppendExit). A log or port-forward tunnel carries
// its bytes as they are, with no chunks.

// TunnelStream is a tunnel's stream after its TunnelReply, at either end.
// CloseWrite ends what this end sends (the other reads io.EOF) and goes
// on reading, for a half-close; Close ends both ways.
type TunnelStream interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// The channels of an exec or attach tunnel.
const (
	ChanStdin  byte = 0
	ChanStdout byte = 1
	ChanStderr byte = 2
	ChanExit   byte = 3 // the node's last chunk: how the command ended
	ChanResize byte = 4 // a terminal size: uvarint width, uvarint height
)

// MaxChunk bounds the data of one chunk. A reader refuses larger chunks,
// so that a peer cannot make it buffer more.
const MaxChunk = 32 << 10

// ErrChunkTooLarge is returned (wrapped) by ChunkReader.Next for a chunk
// over MaxChunk; the stream is then unusable.
var ErrChunkTooLarge = errors.New("tunnel chunk over the limit")

// ChunkWriter writes chunks to a stream. Its methods may be called
// concurrently: each chunk is written whole.
type ChunkWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewChunkWriter returns a ChunkWriter on w.
func NewChunkWriter(w io.Writer) *ChunkWriter { return &ChunkWriter{w: w} }

// Write writes p on channel ch, in as many chunks as it needs. Writing
// nothing writes nothing: use End to end a channel.
func (cw *ChunkWriter) Write(ch byte, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), MaxChunk)
		if err := cw.chunk(ch, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// End ends channel ch: the reader gets a chunk of no data.
func (cw *ChunkWriter) End(ch byte) error { return cw.chunk(ch, nil) }

func (cw *ChunkWriter) chunk(ch byte, p []byte) error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	cw.buf = append(cw.buf[:0], ch)
	cw.buf = binary.AppendUvarint(cw.buf, uint64(len(p)))
	cw.buf = append(cw.buf, p...)
	_, err := cw.w.Write(cw.buf)
	return err
}

// ChannelWriter returns an io.Writer that writes on channel ch.
func (cw *ChunkWriter) ChannelWriter(ch byte) io.Writer { return channelWriter{cw, ch} }

type channelWriter struct {
	cw *ChunkWriter
	ch byte
}

func (w channelWriter) Write(p []byte) (int, error) {
	if err := w.cw.Write(w.ch, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ChunkReader reads chunks from a stream. It is not safe for concurrent
// use.
type ChunkReader struct {
	r   *bufio.Reader
	buf []byte
}

// NewChunkReader returns a ChunkReader on r.
func NewChunkReader(r io.Reader) *ChunkReader {
	return &ChunkReader{r: bufio.NewReaderSize(r, 4096)}
}

// Next returns the next chunk. data is valid until the next call; empty
// data ends channel ch. At the end of the stream between chunks it
// returns io.EOF; inside a chunk, io.ErrUnexpectedEOF.
func (cr *ChunkReader) Next() (ch byte, data []byte, err error) {
	ch, err = cr.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(cr.r)
	if err != nil {
		return 0, nil, noEOF(err)
	}
	if n > MaxChunk {
		return 0, nil, fmt.Errorf("%w: %d bytes on channel %d, limit %d", ErrChunkTooLarge, n, ch, MaxChunk)
	}
	if cap(cr.buf) < int(n) {
		cr.buf = make([]byte, n, MaxChunk)
	}
	cr.buf = cr.buf[:n]
	if _, err := io.ReadFull(cr.r, cr.buf); err != nil {
		return 0, nil, noEOF(err)
	}
	return ch, cr.buf, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendExit appends the data of a ChanExit chunk: the command's exit
// code, and msg when it could not be run at all (then code is -1 and
// msg says why).
func AppendExit(b []byte, code int, msg string) []byte {
	b = binary.AppendVarint(b, int64(code))
	return append(b, msg...)
}

// ParseExit parses the data of a ChanExit chunk.
func ParseExit(data []byte) (code int, msg string, err error) {
	c, n := binary.Varint(data)
	if n <= 0 || c < -1<<31 || c >= 1<<31 {
		return 0, "", fmt.Errorf("%w: exit chunk", ErrMalformed)
	}
	return int(c), string(data[n:]), nil
}

// AppendResize appends the data of a ChanResize chunk.
func AppendResize(b []byte, width, height uint16) []byte {
	b = binary.AppendUvarint(b, uint64(width))
	return binary.AppendUvarint(b, uint64(height))
}

// ParseResize parses the data of a ChanResize chunk.
func ParseResize(data []byte) (width, height uint16, err error) {
	w, n := binary.Uvarint(data)
	if n <= 0 || w > 0xffff {
		return 0, 0, fmt.Errorf("%w: resize chunk", ErrMalformed)
	}
	h, m := binary.Uvarint(data[n:])
	if m <= 0 || h > 0xffff || n+m != len(data) {
		return 0, 0, fmt.Errorf("%w: resize chunk", ErrMalformed)
	}
	return uint16(w), uint16(h), nil
}
