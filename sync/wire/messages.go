package wire

import (
	"fmt"
	"time"
)

// Type identifies a message in its frame.
type Type uint8

// The message types. Numbers are never reused.
const (
	TypeError           Type = 1
	TypeJoinRequest     Type = 2
	TypeJoinResponse    Type = 3
	TypeHello           Type = 4
	TypeWelcome         Type = 5
	TypeInventory       Type = 6
	TypeBatch           Type = 7
	TypeAck             Type = 8
	TypeStatusPush      Type = 9
	TypeStatusAck       Type = 10
	TypeRenewRequest    Type = 11
	TypeRenewResponse   Type = 12
	TypeTunnelOpen      Type = 13
	TypeTunnelReply     Type = 14
	TypeUsage           Type = 15 // since UsageVersion
	TypeArtifactRequest Type = 16 // since ArtifactVersion
	TypeArtifactReply   Type = 17 // since ArtifactVersion
	TypeArtifactChunk   Type = 18 // since ArtifactVersion
)

func (t Type) String() string {
	switch t {
	case TypeError:
		return "Error"
	case TypeJoinRequest:
		return "JoinRequest"
	case TypeJoinResponse:
		return "JoinResponse"
	case TypeHello:
		return "Hello"
	case TypeWelcome:
		return "Welcome"
	case TypeInventory:
		return "Inventory"
	case TypeBatch:
		return "Batch"
	case TypeAck:
		return "Ack"
	case TypeStatusPush:
		return "StatusPush"
	case TypeStatusAck:
		return "StatusAck"
	case TypeRenewRequest:
		return "RenewRequest"
	case TypeRenewResponse:
		return "RenewResponse"
	case TypeTunnelOpen:
		return "TunnelOpen"
	case TypeTunnelReply:
		return "TunnelReply"
	case TypeUsage:
		return "Usage"
	case TypeArtifactRequest:
		return "ArtifactRequest"
	case TypeArtifactReply:
		return "ArtifactReply"
	case TypeArtifactChunk:
		return "ArtifactChunk"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Message is one of the messages below.
type Message interface {
	Type() Type
	appendTo(e *enc)
	unmarshal(b []byte) error
}

// newMessage returns an empty message of type t, or nil for a type this
// build does not know.
func newMessage(t Type) Message {
	switch t {
	case TypeError:
		return &Error{}
	case TypeJoinRequest:
		return &JoinRequest{}
	case TypeJoinResponse:
		return &JoinResponse{}
	case TypeHello:
		return &Hello{}
	case TypeWelcome:
		return &Welcome{}
	case TypeInventory:
		return &Inventory{}
	case TypeBatch:
		return &Batch{}
	case TypeAck:
		return &Ack{}
	case TypeStatusPush:
		return &StatusPush{}
	case TypeStatusAck:
		return &StatusAck{}
	case TypeRenewRequest:
		return &RenewRequest{}
	case TypeRenewResponse:
		return &RenewResponse{}
	case TypeTunnelOpen:
		return &TunnelOpen{}
	case TypeTunnelReply:
		return &TunnelReply{}
	case TypeUsage:
		return &Usage{}
	case TypeArtifactRequest:
		return &ArtifactRequest{}
	case TypeArtifactReply:
		return &ArtifactReply{}
	case TypeArtifactChunk:
		return &ArtifactChunk{}
	}
	return nil
}

// Marshal returns the encoding of m's fields, without framing.
func Marshal(m Message) []byte {
	var e enc
	m.appendTo(&e)
	return e.b
}

// Unmarshal decodes the fields of a message of type t from b, which it does
// not retain.
func Unmarshal(t Type, b []byte) (Message, error) {
	m := newMessage(t)
	if m == nil {
		return nil, fmt.Errorf("%w: unknown message type %d", ErrMalformed, t)
	}
	if err := m.unmarshal(b); err != nil {
		return nil, fmt.Errorf("decode %v: %w", t, err)
	}
	return m, nil
}

// ErrorCode classifies an Error.
type ErrorCode uint32

// Error codes. A peer may send codes this build does not know; they read as
// errors all the same.
const (
	CodeOK           ErrorCode = 0 // only in a StatusResult
	CodeBadRequest   ErrorCode = 1 // the message breaks the protocol
	CodeUnauthorized ErrorCode = 2 // who is asking is not known: bad token or certificate
	CodeForbidden    ErrorCode = 3 // known, but not allowed to do this
	CodeVersion      ErrorCode = 4 // no capability version in common
	CodeTooLarge     ErrorCode = 5 // a frame over the limit
	CodeUnavailable  ErrorCode = 6 // try again later
	CodeInternal     ErrorCode = 7
	CodeNotFound     ErrorCode = 8
	CodeConflict     ErrorCode = 9
	CodeInvalid      ErrorCode = 10 // the object was refused by validation
)

func (c ErrorCode) String() string {
	switch c {
	case CodeOK:
		return "OK"
	case CodeBadRequest:
		return "BadRequest"
	case CodeUnauthorized:
		return "Unauthorized"
	case CodeForbidden:
		return "Forbidden"
	case CodeVersion:
		return "VersionMismatch"
	case CodeTooLarge:
		return "TooLarge"
	case CodeUnavailable:
		return "Unavailable"
	case CodeInternal:
		return "Internal"
	case CodeNotFound:
		return "NotFound"
	case CodeConflict:
		return "Conflict"
	case CodeInvalid:
		return "Invalid"
	}
	return fmt.Sprintf("Code(%d)", uint32(c))
}

// Error ends a stream: the sender says why and closes it. It is also a Go
// error.
type Error struct {
	Code    ErrorCode
	Message string
	// RetryAfter, for CodeUnavailable, is the least the peer should wait
	// before it asks again; 0 leaves it to the peer's own back-off. On the
	// wire in whole milliseconds, since capability version 2; an older
	// peer ignores it.
	RetryAfter time.Duration
}

func (m *Error) Type() Type { return TypeError }
func (m *Error) Error() string {
	return fmt.Sprintf("%v: %s", m.Code, m.Message)
}

func (m *Error) appendTo(e *enc) {
	e.uint(1, uint64(m.Code))
	e.string(2, m.Message)
	if m.RetryAfter > 0 { // rounded up, so that a wait is never lost
		e.uint(3, uint64((m.RetryAfter+time.Millisecond-1)/time.Millisecond))
	}
}

func (m *Error) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			var v uint32
			v, err = f.uint32()
			m.Code = ErrorCode(v)
		case 2:
			m.Message, err = f.str()
		case 3:
			m.RetryAfter, err = f.millis()
		}
		return err
	})
}

// JoinRequest asks the hub, on a connection without a client certificate,
// to admit a node: a bootstrap token, and a certificate signing request
// (DER) for the node's key.
type JoinRequest struct {
	CapabilityVersion uint32
	Token             string
	NodeName          string
	Site              string
	CSR               []byte
}

func (m *JoinRequest) Type() Type { return TypeJoinRequest }

func (m *JoinRequest) appendTo(e *enc) {
	e.uint(1, uint64(m.CapabilityVersion))
	e.string(2, m.Token)
	e.string(3, m.NodeName)
	e.string(4, m.Site)
	e.bytes(5, m.CSR)
}

func (m *JoinRequest) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			m.CapabilityVersion, err = f.uint32()
		case 2:
			m.Token, err = f.str()
		case 3:
			m.NodeName, err = f.str()
		case 4:
			m.Site, err = f.str()
		case 5:
			m.CSR, err = f.bytes()
		}
		return err
	})
}

// JoinResponse admits a node: its certificate (DER) and the hub CA's
// certificate (DER) to trust from then on.
type JoinResponse struct {
	Certificate []byte
	CA          []byte
}

func (m *JoinResponse) Type() Type { return TypeJoinResponse }

func (m *JoinResponse) appendTo(e *enc) {
	e.bytes(1, m.Certificate)
	e.bytes(2, m.CA)
}

func (m *JoinResponse) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			m.Certificate, err = f.bytes()
		case 2:
			m.CA, err = f.bytes()
		}
		return err
	})
}

// Hello opens a session. LastRevision is the hub revision through which
// the edge has applied its view, 0 if it never synced.
type Hello struct {
	CapabilityVersion uint32
	NodeName          string
	LastRevision      int64
	AgentVersion      string
	// Tokens lists the objects of ResourcePodTokens the edge holds, at
	// their revisions (see PodTokens), since capability version 3: the
	// hub mints again only those that are due, or whose pod changed. Since
	// version 5 it lists those of ResourceMeshKeys too (see MeshKeys): the
	// hub sends the site's keys again only when they rotated.
	Tokens []InventoryEntry
}

func (m *Hello) Type() Type { return TypeHello }

func (m *Hello) appendTo(e *enc) {
	e.uint(1, uint64(m.CapabilityVersion))
	e.string(2, m.NodeName)
	e.int(3, m.LastRevision)
	e.string(4, m.AgentVersion)
	for _, en := range m.Tokens {
		e.message(5, func(e *enc) { encodeEntry(e, en) })
	}
}

func (m *Hello) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			m.CapabilityVersion, err = f.uint32()
		case 2:
			m.NodeName, err = f.str()
		case 3:
			m.LastRevision, err = f.revision()
		case 4:
			m.AgentVersion, err = f.str()
		case 5:
			var body []byte
			if body, err = f.sub(); err != nil {
				return err
			}
			var en InventoryEntry
			if en, err = decodeEntry(body); err != nil {
				return err
			}
			m.Tokens = append(m.Tokens, en)
		}
		return err
	})
}

// Welcome accepts a session in the capability version both speak. With
// SendInventory the hub cannot replay changes from the edge's LastRevision
// (it was compacted) and asks for the edge's Inventory first.
type Welcome struct {
	CapabilityVersion uint32
	HubRevision       int64
	SendInventory     bool
}

func (m *Welcome) Type() Type { return TypeWelcome }

func (m *Welcome) appendTo(e *enc) {
	e.uint(1, uint64(m.CapabilityVersion))
	e.int(2, m.HubRevision)
	e.bool(3, m.SendInventory)
}

func (m *Welcome) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			m.CapabilityVersion, err = f.uint32()
		case 2:
			m.HubRevision, err = f.revision()
		case 3:
			m.SendInventory, err = f.boolean()
		}
		return err
	})
}

// InventoryEntry is one object the edge holds, at its resourceVersion.
type InventoryEntry struct {
	Key      Key
	Revision int64
}

// Inventory lists the objects of the edge's checkpointed view; a long one
// comes in several frames, all but the last with More set.
type Inventory struct {
	Entries []InventoryEntry
	More    bool
}

func (m *Inventory) Type() Type { return TypeInventory }

func (m *Inventory) appendTo(e *enc) {
	for _, en := range m.Entries {
		e.message(1, func(e *enc) { encodeEntry(e, en) })
	}
	e.bool(2, m.More)
}

// encodeEntry and decodeEntry carry an InventoryEntry as a nested message.
func encodeEntry(e *enc, en InventoryEntry) {
	e.message(1, func(e *enc) { encodeKey(e, en.Key) })
	e.int(2, en.Revision)
}

func decodeEntry(b []byte) (InventoryEntry, error) {
	var en InventoryEntry
	err := eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			var kb []byte
			if kb, err = f.sub(); err == nil {
				en.Key, err = decodeKey(kb)
			}
		case 2:
			en.Revision, err = f.revision()
		}
		return err
	})
	if err != nil {
		return InventoryEntry{}, err
	}
	if en.Key == (Key{}) {
		return InventoryEntry{}, fmt.Errorf("%w: inventory entry without a key", ErrMalformed)
	}
	return en, nil
}

func (m *Inventory) unmarshal(b []byte) error {
	return eachField(b, func(f field) error {
		switch f.num {
		case 1:
			body, err := f.sub()
			if err != nil {
				return err
			}
			en, err := decodeEntry(body)
			if err != nil {
				return err
			}
			m.Entries = append(m.Entries, en)
			return nil
		case 2:
			var err error
			m.More, err = f.boolean()
			return err
		}
		return nil
	})
}

// ChangeOp says what happened to an object of the view.
type ChangeOp uint8

const (
	// OpPut: the object is in the view at this revision (created, changed,
	// or newly part of the view).
	OpPut ChangeOp = 1
	// OpDelete: the object left the view (deleted, or no longer the
	// node's). Deleting what the edge does not hold is a no-op.
	OpDelete ChangeOp = 2
)

// Change is one object of the view: Object is its Kubernetes protobuf
// encoding for OpPut (for ResourcePodTokens, a PodTokens; for
// ResourceMeshKeys, a MeshKeys), empty for OpDelete. Revision is the
// object's resourceVersion (for ResourcePodTokens, when the hub mints it
// again: see PodTokens; for ResourceMeshKeys, the start of its last key:
// see MeshKeys), or for a delete the hub revision it happened at.
type Change struct {
	Op       ChangeOp
	Key      Key
	Revision int64
	Object   []byte
}

// Batch carries changes of the view in hub-revision order. Once the edge
// has made the batch durable, its view is complete through Revision; it
// answers with an Ack of that revision. A batch without changes only moves
// the revision on. Revision 0 marks a batch that more batches of the same
// step follow (a resume too large for one frame): the edge applies it but
// keeps its last revision until the step's last batch, and acknowledges
// only that one.
type Batch struct {
	Changes  []Change
	Revision int64
}

func (m *Batch) Type() Type { return TypeBatch }

func (m *Batch) appendTo(e *enc) {
	for _, c := range m.Changes {
		e.message(1, func(e *enc) {
			e.uint(1, uint64(c.Op))
			e.message(2, func(e *enc) { encodeKey(e, c.Key) })
			e.int(3, c.Revision)
			e.bytes(4, c.Object)
		})
	}
	e.int(2, m.Revision)
}

func (m *Batch) unmarshal(b []byte) error {
	return eachField(b, func(f field) error {
		switch f.num {
		case 1:
			body, err := f.sub()
			if err != nil {
				return err
			}
			var c Change
			err = eachField(body, func(f field) (err error) {
				switch f.num {
				case 1:
					var v uint64
					v, err = f.varint()
					c.Op = ChangeOp(v)
				case 2:
					var kb []byte
					if kb, err = f.sub(); err == nil {
						c.Key, err = decodeKey(kb)
					}
				case 3:
					c.Revision, err = f.revision()
				case 4:
					c.Object, err = f.bytes()
				}
				return err
			})
			if err != nil {
				return err
			}
			switch {
			case c.Op != OpPut && c.Op != OpDelete:
				return fmt.Errorf("%w: change of %s with unknown op %d", ErrMalformed, c.Key, c.Op)
			case c.Key == (Key{}):
				return fmt.Errorf("%w: change without a key", ErrMalformed)
			case c.Op == OpPut && len(c.Object) == 0:
				return fmt.Errorf("%w: put of %s without an object", ErrMalformed, c.Key)
			}
			m.Changes = append(m.Changes, c)
			return nil
		case 2:
			var err error
			m.Revision, err = f.revision()
			return err
		}
		return nil
	})
}

// Ack tells the hub the edge's view is durable through Revision.
type Ack struct {
	Revision int64
}

func (m *Ack) Type() Type { return TypeAck }

func (m *Ack) appendTo(e *enc) { e.int(1, m.Revision) }

func (m *Ack) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		if f.num == 1 {
			m.Revision, err = f.revision()
		}
		return err
	})
}

// StatusKind says what a StatusItem asks of the hub.
type StatusKind uint8

const (
	// KindPodStatus: Object is a Pod whose status replaces the hub's.
	KindPodStatus StatusKind = 1
	// KindNodeStatus: Object is the node's Node whose status replaces the
	// hub's.
	KindNodeStatus StatusKind = 2
	// KindEvent: Object is a core/v1 Event to record.
	KindEvent StatusKind = 3
	// KindPodTerminated: the pod's containers have stopped after the hub
	// asked for its deletion; Object is the Pod (its UID is a
	// precondition) and the hub removes it.
	KindPodTerminated StatusKind = 4
	// KindMirrorPod: Object is the mirror of a static pod, created or
	// updated on the hub.
	KindMirrorPod StatusKind = 5
	// KindMirrorPodDelete: the static pod of Key is gone; its mirror is
	// removed.
	KindMirrorPodDelete StatusKind = 6
)

// StatusItem is one entry of the edge's outbox. Seq orders the entries and
// names them in the acknowledgement.
type StatusItem struct {
	Seq    uint64
	Kind   StatusKind
	Key    Key
	Object []byte
}

// StatusPush sends outbox entries; the hub answers with one StatusAck
// covering all of them.
type StatusPush struct {
	Items []StatusItem
}

func (m *StatusPush) Type() Type { return TypeStatusPush }

func (m *StatusPush) appendTo(e *enc) {
	for _, it := range m.Items {
		e.message(1, func(e *enc) {
			e.uint(1, it.Seq)
			e.uint(2, uint64(it.Kind))
			e.message(3, func(e *enc) { encodeKey(e, it.Key) })
			e.bytes(4, it.Object)
		})
	}
}

func (m *StatusPush) unmarshal(b []byte) error {
	return eachField(b, func(f field) error {
		if f.num != 1 {
			return nil
		}
		body, err := f.sub()
		if err != nil {
			return err
		}
		var it StatusItem
		err = eachField(body, func(f field) (err error) {
			switch f.num {
			case 1:
				it.Seq, err = f.varint()
			case 2:
				var v uint64
				v, err = f.varint()
				it.Kind = StatusKind(v)
			case 3:
				var kb []byte
				if kb, err = f.sub(); err == nil {
					it.Key, err = decodeKey(kb)
				}
			case 4:
				it.Object, err = f.bytes()
			}
			return err
		})
		if err != nil {
			return err
		}
		if it.Key == (Key{}) {
			return fmt.Errorf("%w: status item %d without a key", ErrMalformed, it.Seq)
		}
		m.Items = append(m.Items, it)
		return nil
	})
}

// StatusResult is the hub's answer to one StatusItem: CodeOK, or why it
// was refused. Either way the edge drops the item: a refused status would
// be refused again.
type StatusResult struct {
	Seq     uint64
	Code    ErrorCode
	Message string
}

// StatusAck answers a StatusPush, one result per item.
type StatusAck struct {
	Results []StatusResult
}

func (m *StatusAck) Type() Type { return TypeStatusAck }

func (m *StatusAck) appendTo(e *enc) {
	for _, r := range m.Results {
		e.message(1, func(e *enc) {
			e.uint(1, r.Seq)
			e.uint(2, uint64(r.Code))
			e.string(3, r.Message)
		})
	}
}

func (m *StatusAck) unmarshal(b []byte) error {
	return eachField(b, func(f field) error {
		if f.num != 1 {
			return nil
		}
		body, err := f.sub()
		if err != nil {
			return err
		}
		var r StatusResult
		err = eachField(body, func(f field) (err error) {
			switch f.num {
			case 1:
				r.Seq, err = f.varint()
			case 2:
				var v uint32
				v, err = f.uint32()
				r.Code = ErrorCode(v)
			case 3:
				r.Message, err = f.str()
			}
			return err
		})
		if err != nil {
			return err
		}
		m.Results = append(m.Results, r)
		return nil
	})
}

// RenewRequest asks, over a session authenticated by the node's current
// certificate, for a new certificate for the key of CSR (DER).
type RenewRequest struct {
	CSR []byte
}

func (m *RenewRequest) Type() Type      { return TypeRenewRequest }
func (m *RenewRequest) appendTo(e *enc) { e.bytes(1, m.CSR) }

func (m *RenewRequest) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		if f.num == 1 {
			m.CSR, err = f.bytes()
		}
		return err
	})
}

// RenewResponse carries the renewed certificate (DER).
type RenewResponse struct {
	Certificate []byte
}

func (m *RenewResponse) Type() Type      { return TypeRenewResponse }
func (m *RenewResponse) appendTo(e *enc) { e.bytes(1, m.Certificate) }

func (m *RenewResponse) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		if f.num == 1 {
			m.Certificate, err = f.bytes()
		}
		return err
	})
}

// Param is one parameter of a TunnelOpen.
type Param struct {
	Name  string
	Value string
}

// TunnelOpen starts a stream the hub opened to the edge: Kind names the
// service (logs, exec, port-forward, ...), Params its arguments in order.
type TunnelOpen struct {
	Kind   string
	Params []Param
}

func (m *TunnelOpen) Type() Type { return TypeTunnelOpen }

func (m *TunnelOpen) appendTo(e *enc) {
	e.string(1, m.Kind)
	for _, p := range m.Params {
		e.message(2, func(e *enc) {
			e.string(1, p.Name)
			e.string(2, p.Value)
		})
	}
}

func (m *TunnelOpen) unmarshal(b []byte) error {
	return eachField(b, func(f field) (err error) {
		switch f.num {
		case 1:
			m.Kind, err = f.str()
		case 2:
			var body []byte
			if body, err = f.sub(); err != nil {
				return err
			}
			var p Param
			err = eachField(body, func(f field) (err error) {
				switch f.num {
				case 1:
					p.Name, err = f.str()
				case 2:
					p.Value, err = f.str()
				}
				return err
			})
			m.Params = append(m.Params, p)
		}
		return err
	})
}

// Param returns the value of the first parameter named name, or "".
func (m *TunnelOpen) Param(name string) string {
	for _, p := range m.Params {
		if p.Name == name {
			return p.Value
		}
	}
	return ""
}

// TunnelReply accepts a tunnel; from then on the stream carries the
// service's own bytes. A refused tunnel gets an Error instead.
type TunnelReply struct{}

func (m *TunnelReply) Type() Type    { return TypeTunnelReply }
func (m *TunnelReply) appendTo(*enc) {}
func (m *TunnelReply) unmarshal(b []byte) error {
	return eachField(b, func(field) error { return nil })
}
