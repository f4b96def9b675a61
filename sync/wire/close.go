package wire

// CloseCode is the application error code with which either end closes a
// connection (a QUIC CONNECTION_CLOSE); its reason phrase says more. A
// peer may send codes this build does not know: they say only that the
// connection ended, which is all a close ever makes the other end do, so
// new codes need no new capability version.
type CloseCode uint64

// Close codes.
const (
	CloseDone     CloseCode = 0 // the session ended as it should
	CloseProtocol CloseCode = 1 // the other end broke the protocol
	CloseReplaced CloseCode = 2 // a newer connection of the node replaced this one
	CloseShutdown CloseCode = 3 // the hub shuts down, or the link fell silent
	CloseAuth     CloseCode = 4 // the node could not be authenticated
	// CloseNodeError: the node ended its session on a failure of its own,
	// such as its checkpoint refusing a write; the reason says which, so
	// that the hub can tell its operator.
	CloseNodeError CloseCode = 5
)

// MaxCloseReason bounds the reason phrase of a close, which must fit in
// one packet with the rest of the frame.
const MaxCloseReason = 256

// CloseReason returns s cut to MaxCloseReason bytes, on a rune boundary.
func CloseReason(s string) string {
	if len(s) <= MaxCloseReason {
		return s
	}
	cut := MaxCloseReason
	for cut > 0 && s[cut]&0xc0 == 0x80 { // a continuation byte
		cut--
	}
	return s[:cut]
}
