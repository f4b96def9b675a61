package manifest

import (
	"errors"
	"fmt"
)

// Reason is the short CamelCase cause of a refusal, written as is into a
// node's status and a rollout's, so an operator can count refusals by cause.
type Reason string

// The reasons a manifest, an envelope or an artifact is refused.
const (
	// TooLarge: the envelope is over MaxEnvelopeBytes, or a list in it is
	// over its limit.
	TooLarge Reason = "TooLarge"
	// Malformed: the envelope or the manifest does not decode (bad JSON,
	// unknown or duplicate field, wrong type, trailing data).
	Malformed Reason = "Malformed"
	// Invalid: the manifest decodes but breaks a rule of its content.
	Invalid Reason = "Invalid"
	// UnknownKey: no signature is by a trusted key, or the node trusts no
	// usable key at all.
	UnknownKey Reason = "UnknownKey"
	// BadSignature: a signature attributed to a trusted key does not verify.
	BadSignature Reason = "BadSignature"
	// NotEnoughSignatures: fewer distinct trusted keys signed than the
	// threshold asks for.
	NotEnoughSignatures Reason = "NotEnoughSignatures"
	// Expired: the node's clock is at or past the manifest's expiry.
	Expired Reason = "Expired"
	// Downgrade: the version is lower than the node's highest committed one
	// and AllowDowngradeFrom does not cover it.
	Downgrade Reason = "Downgrade"
	// WrongPlatform: no component is for the node's OS and architecture.
	WrongPlatform Reason = "WrongPlatform"
	// DigestMismatch: artifact bytes do not match the manifest's digests or
	// size (a corrupted, truncated or overlong chunk or file).
	DigestMismatch Reason = "DigestMismatch"
)

// Error is every refusal of this package: a manifest, an envelope or an
// artifact that a node must not install. Other errors (I/O, bad arguments)
// are plain errors.
type Error struct {
	Reason  Reason
	Message string
}

// Error returns the reason followed by the message.
func (e *Error) Error() string {
	return "firmware manifest: " + string(e.Reason) + ": " + e.Message
}

// Is reports whether target is an *Error of the same Reason, so that
// errors.Is(err, &manifest.Error{Reason: manifest.Expired}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason
}

// ReasonOf returns the Reason of the *Error in err's chain, or "" if err is
// nil or not a refusal.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// refuse returns an *Error of reason r with a formatted message.
func refuse(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Message: fmt.Sprintf(format, args...)}
}
