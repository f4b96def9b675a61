package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// ArtifactVersion is the first capability version with artifact streams:
// a node opens one only on a session of that version or later, so an
// older hub never gets a frame type it does not know.
const ArtifactVersion = 6

// Limits of the artifact stream's frames. MaxArtifactChunkSize bounds a
// component's chunk size on the wire, below the manifest's own limit, so
// that a chunk frame with its fields fits in DefaultMaxFrameSize; a
// release with larger chunks is refused by the hub (CodeInvalid).
// MaxArtifactChunkData bounds the data of one ArtifactChunk: a raw chunk,
// or a zstd frame that decodes to one, which a hub sends only when it is
// smaller than the chunk (the slack is for a zstd frame's header).
// MaxArtifactEnvelope is the largest manifest envelope an ArtifactReply
// carries, firmware/manifest's MaxEnvelopeBytes.
const (
	MaxArtifactChunkSize = 2 << 20
	MaxArtifactChunkData = MaxArtifactChunkSize + 1<<10
	MaxArtifactEnvelope  = 1 << 20
	MaxArtifactName      = 253
	// MaxArtifactChunks is the most chunks of a component,
	// firmware/manifest's MaxChunks.
	MaxArtifactChunks = 1 << 16
)

// SHA256Size is the length of a digest on the artifact stream.
const SHA256Size = 32

// ArtifactMode says how an artifact stream sends its chunks.
type ArtifactMode uint8

// The artifact modes. A reply to a manifest request has none.
const (
	ArtifactFull  ArtifactMode = 1 // each chunk as it is
	ArtifactDelta ArtifactMode = 2 // each chunk raw or as a zstd patch on the base
)

func (m ArtifactMode) String() string {
	switch m {
	case 0:
		return "none"
	case ArtifactFull:
		return "full"
	case ArtifactDelta:
		return "delta"
	}
	return fmt.Sprintf("ArtifactMode(%d)", uint8(m))
}

// ArtifactRequest opens an artifact stream, since capability version 6
// (ArtifactVersion). The node asks either for the manifest envelope of
// Release (Component empty), answered by one ArtifactReply carrying it,
// or for the artifact of one of its components: SHA256 names the
// artifact the node expects (the manifest's, which it verified), From
// the chunk to start at (a resume), Base the sha256 of an artifact the
// node holds and would take a delta against (empty for none), and Rate
// the most bytes per second the hub should send (0: no cap). The hub
// answers an ArtifactReply, then the chunks From.. in order as
// ArtifactChunk frames, and ends its side of the stream.
type ArtifactRequest struct {
	Release    string
	Component  string
	SHA256     []byte
	FromChunk  uint32
	BaseSHA256 []byte
	Rate       uint64
}

func (m *ArtifactRequest) Type() Type { return TypeArtifactRequest }

func (m *ArtifactRequest) appendTo(e *enc) {
	e.string(1, m.Release)
	e.string(2, m.Component)
	e.bytes(3, m.SHA256)
	e.uint(4, uint64(m.FromChunk))
	e.bytes(5, m.BaseSHA256)
	e.uint(6, m.Rate)
}

func (m *ArtifactRequest) unmarshal(b []byte) error {
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			m.Release, err = artifactName(f)
		case 2:
			m.Component, err = artifactName(f)
		case 3:
			m.SHA256, err = digest(f)
		case 4:
			m.FromChunk, err = f.uint32()
			if err == nil && m.FromChunk > MaxArtifactChunks {
				err = fmt.Errorf("%w: from chunk %d, over %d", ErrMalformed, m.FromChunk, MaxArtifactChunks)
			}
		case 5:
			m.BaseSHA256, err = digest(f)
		case 6:
			m.Rate, err = f.varint()
		}
		return err
	})
	if err != nil {
		return err
	}
	switch {
	case m.Release == "":
		return fmt.Errorf("%w: artifact request without a release", ErrMalformed)
	case m.Component != "" && len(m.SHA256) == 0:
		return fmt.Errorf("%w: artifact request for %s without a sha256", ErrMalformed, m.Component)
	case m.Component == "" && (len(m.SHA256) > 0 || len(m.BaseSHA256) > 0 || m.FromChunk > 0):
		return fmt.Errorf("%w: manifest request with artifact fields", ErrMalformed)
	}
	return nil
}

// ArtifactReply answers an ArtifactRequest. Code is CodeOK, or says why
// the request is refused (CodeNotFound: no such release, component or
// artifact; CodeUnavailable: the hub is busy, ask again later; CodeInvalid:
// the hub cannot serve it) with Message, and then the hub ends the stream.
// For a manifest request, Envelope is the release's envelope, at most
// MaxArtifactEnvelope bytes. For an artifact, Mode is how the chunks come
// (ArtifactDelta only when the node named a base the hub holds), Size the
// artifact's length and ChunkSize its chunk size, as the manifest has them.
type ArtifactReply struct {
	Code      ErrorCode
	Message   string
	Mode      ArtifactMode
	Size      uint64
	ChunkSize uint32
	Envelope  []byte
}

func (m *ArtifactReply) Type() Type { return TypeArtifactReply }

func (m *ArtifactReply) appendTo(e *enc) {
	e.uint(1, uint64(m.Code))
	e.string(2, m.Message)
	e.uint(3, uint64(m.Mode))
	e.uint(4, m.Size)
	e.uint(5, uint64(m.ChunkSize))
	e.bytes(6, m.Envelope)
}

func (m *ArtifactReply) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			var c uint32
			c, err = f.uint32()
			m.Code = ErrorCode(c)
		case 2:
			m.Message, err = f.str()
			if err == nil && len(m.Message) > MaxArtifactEnvelope {
				err = fmt.Errorf("%w: artifact reply message of %d bytes", ErrMalformed, len(m.Message))
			}
		case 3:
			var v uint64
			if v, err = f.varint(); err == nil {
				if v == 0 || v > uint64(ArtifactDelta) {
					return fmt.Errorf("%w: artifact mode %d", ErrMalformed, v)
				}
				m.Mode = ArtifactMode(v)
			}
		case 4:
			m.Size, err = f.varint()
			if err == nil && m.Size > uint64(MaxArtifactChunks)*MaxArtifactChunkSize {
				err = fmt.Errorf("%w: artifact of %d bytes", ErrMalformed, m.Size)
			}
		case 5:
			m.ChunkSize, err = f.uint32()
			if err == nil && m.ChunkSize > MaxArtifactChunkSize {
				err = fmt.Errorf("%w: chunk size %d, over %d", ErrMalformed, m.ChunkSize, MaxArtifactChunkSize)
			}
		case 6:
			if f.typ == protowire.BytesType && len(f.b) > MaxArtifactEnvelope {
				return fmt.Errorf("%w: envelope of %d bytes, over %d", ErrMalformed, len(f.b), MaxArtifactEnvelope)
			}
			m.Envelope, err = f.bytes()
		}
		return err
	})
}

// ArtifactChunk is chunk Index of the artifact, after the ArtifactReply.
// Data is the chunk, or with Delta set a zstd frame that decodes to it
// with the whole base artifact as its raw dictionary; each frame decodes
// on its own, so a resumed stream needs nothing of an earlier one. Data
// is at most MaxArtifactChunkData bytes.
type ArtifactChunk struct {
	Index uint32
	Data  []byte
	Delta bool
}

func (m *ArtifactChunk) Type() Type { return TypeArtifactChunk }

func (m *ArtifactChunk) appendTo(e *enc) {
	e.uint(1, uint64(m.Index))
	e.bytes(2, m.Data)
	e.bool(3, m.Delta)
}

func (m *ArtifactChunk) unmarshal(b []byte) error {
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			m.Index, err = f.uint32()
			if err == nil && m.Index >= MaxArtifactChunks {
				err = fmt.Errorf("%w: chunk %d, over %d", ErrMalformed, m.Index, MaxArtifactChunks)
			}
		case 2:
			if f.typ == protowire.BytesType && len(f.b) > MaxArtifactChunkData {
				return fmt.Errorf("%w: chunk data of %d bytes, over %d", ErrMalformed, len(f.b), MaxArtifactChunkData)
			}
			m.Data, err = f.bytes()
		case 3:
			m.Delta, err = f.boolean()
		}
		return err
	})
	if err == nil && len(m.Data) == 0 {
		err = fmt.Errorf("%w: chunk %d without data", ErrMalformed, m.Index)
	}
	return err
}

// ArtifactStream is an artifact stream at either end, as sync/stream's
// Stream is: one goroutine may Read while another writes, and Abort may
// run at any time, ending both ways and unblocking a Read or Write.
type ArtifactStream interface {
	Read() (Message, error)
	Write(m Message) error
	CloseWrite() error
	Abort(code ErrorCode)
}

func artifactName(f field) (string, error) {
	s, err := f.str()
	if err == nil && len(s) > MaxArtifactName {
		err = fmt.Errorf("%w: name of %d bytes, over %d", ErrMalformed, len(s), MaxArtifactName)
	}
	return s, err
}

func digest(f field) ([]byte, error) {
	b, err := f.bytes()
	if err == nil && len(b) != SHA256Size {
		err = fmt.Errorf("%w: digest of %d bytes", ErrMalformed, len(b))
	}
	return b, err
}
