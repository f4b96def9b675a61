package updater

import (
	"errors"
	"fmt"
)

// Reason is the short CamelCase cause of a refusal or a failed trial, written
// as is into the node's firmware status (NodeFirmware.Reason).
type Reason string

// The reasons of this package. Refusals of an artifact by its digests carry
// firmware/manifest's DigestMismatch.
const (
	// Downgrade: the version is below the highest committed one and the
	// caller did not say the signed manifest allows it.
	Downgrade Reason = "Downgrade"
	// AlreadyFailed: the version failed on this node before.
	AlreadyFailed Reason = "AlreadyFailed"
	// AlreadyCommitted: the version is the one committed.
	AlreadyCommitted Reason = "AlreadyCommitted"
	// DigestMismatch: the artifact does not match the component's size and
	// digests.
	DigestMismatch Reason = "DigestMismatch"
	// WrongKind: an agent component given to InstallFile or the reverse.
	WrongKind Reason = "WrongKind"
	// WrongPlatform: an agent built for another OS or architecture.
	WrongPlatform Reason = "WrongPlatform"
	// BadInput: a name, version or window that this package cannot take.
	BadInput Reason = "BadInput"
	// NoHook: a file component and no install hook configured.
	NoHook Reason = "NoHook"

	// CrashedInTrial: the trial binary started MaxBoots times without
	// committing; it crashed, was killed, or the machine lost power.
	CrashedInTrial Reason = "CrashedInTrial"
	// HealthWindowExpired: the trial did not commit within its health
	// window plus the grace.
	HealthWindowExpired Reason = "HealthWindowExpired"
	// Unhealthy: the agent's own health check failed (the usual reason for
	// Revert).
	Unhealthy Reason = "Unhealthy"
	// SlotMissing: a slot binary the state names is gone.
	SlotMissing Reason = "SlotMissing"
	// HookFailed: the install hook exited non-zero or timed out.
	HookFailed Reason = "HookFailed"
	// HookInterrupted: the agent died while the install hook ran.
	HookInterrupted Reason = "HookInterrupted"
	// RevertOrdered: the hub ordered the committed version reverted.
	RevertOrdered Reason = "RevertOrdered"
	// StateCorrupt: the state file did not decode; the agent booted the
	// installed binary and started a new state.
	StateCorrupt Reason = "StateCorrupt"
)

// Error is a refusal of an install or a transition: nothing was installed
// or changed. Other errors (I/O) are plain errors.
type Error struct {
	Reason  Reason
	Message string
}

// Error returns the reason followed by the message.
func (e *Error) Error() string { return "firmware updater: " + string(e.Reason) + ": " + e.Message }

// Is reports whether target is an *Error of the same Reason, so that
// errors.Is(err, &updater.Error{Reason: updater.Downgrade}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason
}

// ReasonOf returns the Reason of the *Error in err's chain, or "".
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func refuse(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Message: fmt.Sprintf(format, args...)}
}

var (
	// ErrTrialInProgress is returned by InstallAgent and InstallFile while
	// a trial of the same kind (the agent, or that file component) has
	// not ended.
	ErrTrialInProgress = errors.New("firmware updater: a trial is in progress")
	// ErrNoTrial is returned by Commit, Revert, CommitFile and RevertFile
	// when there is no trial to end.
	ErrNoTrial = errors.New("firmware updater: no trial")
	// ErrTrialNotStarted is returned by Commit when the trial binary has
	// not booted yet: only the trial binary may commit itself.
	ErrTrialNotStarted = errors.New("firmware updater: the trial binary has not started")
	// ErrNoPrevious is returned by RevertCommitted when there is no
	// previous version to go back to.
	ErrNoPrevious = errors.New("firmware updater: no previous version to revert to")
	// ErrCorruptState is matched (errors.Is) by every *CorruptStateError.
	ErrCorruptState = errors.New("firmware updater: corrupt state")
)

// CorruptStateError is the state file failing to decode or validate. It is
// recoverable: Boot moves the file aside, boots the installed binary and
// starts an empty state, and returns this error with a usable Decision.
type CorruptStateError struct {
	Path string
	Err  error
}

func (e *CorruptStateError) Error() string {
	return fmt.Sprintf("firmware updater: corrupt state %s: %v", e.Path, e.Err)
}

// Unwrap returns the decoding error.
func (e *CorruptStateError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorruptState) hold.
func (e *CorruptStateError) Is(target error) bool { return target == ErrCorruptState }
