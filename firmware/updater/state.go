package updater

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	firmwarev1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/internal/limitread"
)

// Limits of the state file, which a crash, a bad disk or a person may have
// damaged: decoding is bounded before it allocates.
const (
	// MaxStateBytes is the largest state file Boot reads.
	MaxStateBytes = 256 << 10
	// MaxFailed is how many failed versions the state remembers, the latest.
	MaxFailed = 32
	// MaxFiles is how many file components the state tracks.
	MaxFiles = manifest.MaxComponents
	// maxText bounds names, reasons and messages in the state.
	maxText = 4 << 10
	// maxWindow bounds a trial's health window.
	maxWindow = 7 * 24 * time.Hour
)

// stateFormat is the version of the state file's format.
const stateFormat = 1

// Slot names. SlotInstalled ("") is the binary the node was installed with
// from a package, which runs until the first update commits.
const (
	SlotA         = "a"
	SlotB         = "b"
	SlotInstalled = ""
)

// State is what the updater keeps on disk, in <dir>/state.json.
type State struct {
	Format int `json:"format"`
	// AgentComponent is the manifest name of the agent component last
	// installed, so that Base can answer for it.
	AgentComponent string `json:"agentComponent,omitempty"`
	// Committed is the slot the node boots; nil means the installed binary.
	Committed *Slot `json:"committed,omitempty"`
	// Previous is what was committed before Committed, for
	// RevertCommitted; Slot "" there means the installed binary.
	Previous *Slot `json:"previous,omitempty"`
	// Trial is the agent under trial, or nil.
	Trial *Trial `json:"trial,omitempty"`
	// Highest is the highest version committed (agent), for refusing
	// downgrades.
	Highest string `json:"highest,omitempty"`
	// Failed are the versions that failed here, oldest first, at most
	// MaxFailed.
	Failed []Failure `json:"failed,omitempty"`
	// Files are the file components, in the order first installed.
	Files []*FileRecord `json:"files,omitempty"`
	// LastOutcome is the latest transition, for the agent to report.
	LastOutcome *Outcome `json:"lastOutcome,omitempty"`
}

// Slot is a committed agent: which slot and which release it came from.
type Slot struct {
	Slot    string `json:"slot"`
	Release string `json:"release,omitempty"`
	Version string `json:"version,omitempty"`
	Size    int64  `json:"size,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
}

// Trial is an agent (or file component) on trial: it must commit before
// Deadline, or it is reverted.
type Trial struct {
	Slot    string `json:"slot"`
	Release string `json:"release"`
	Version string `json:"version"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	// Installed is when the trial marker was written; Started when the
	// trial binary first booted (zero before).
	Installed time.Time `json:"installed"`
	Started   time.Time `json:"started,omitzero"`
	// Window is the health window the trial has to commit in.
	Window time.Duration `json:"window"`
	// Boots counts the starts of the trial binary; at MaxBoots the next
	// start reverts.
	Boots    int `json:"boots"`
	MaxBoots int `json:"maxBoots"`
}

// Deadline is when the trial must have committed: Window after the trial
// binary first started, or after the install if it has not.
func (t *Trial) Deadline() time.Time {
	if t.Started.IsZero() {
		return t.Installed.Add(t.Window)
	}
	return t.Started.Add(t.Window)
}

// Failure is a version that failed on this node and why.
type Failure struct {
	Version   string    `json:"version"`
	Release   string    `json:"release,omitempty"`
	Component string    `json:"component,omitempty"`
	Reason    Reason    `json:"reason"`
	Message   string    `json:"message,omitempty"`
	At        time.Time `json:"at"`
}

// FileRecord is one file component: its committed artifact, kept under the
// directory as the base for delta downloads, and its trial.
type FileRecord struct {
	Name      string     `json:"name"`
	Committed *FileState `json:"committed,omitempty"`
	Trial     *FileTrial `json:"trial,omitempty"`
}

// FileState is an artifact of a file component, stored at
// files/<hash of name>/<SHA256>.
type FileState struct {
	Release string `json:"release"`
	Version string `json:"version"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
}

// File trial phases.
const (
	// PhaseInstalling: the hook's install verb is (or was, at a crash)
	// running.
	PhaseInstalling = "Installing"
	// PhaseInstalled: the hook installed the artifact; the trial awaits
	// CommitFile or RevertFile.
	PhaseInstalled = "Installed"
)

// FileTrial is a file component on trial.
type FileTrial struct {
	FileState
	Phase     string        `json:"phase"`
	Installed time.Time     `json:"installed"`
	Window    time.Duration `json:"window"`
}

// Deadline is when the file trial must have committed.
func (t *FileTrial) Deadline() time.Time { return t.Installed.Add(t.Window) }

// Outcome is the latest transition of the updater, what the agent reports to
// the hub as its NodeFirmware state.
type Outcome struct {
	Component string                   `json:"component,omitempty"`
	Release   string                   `json:"release,omitempty"`
	Version   string                   `json:"version,omitempty"`
	State     firmwarev1.FirmwareState `json:"state"`
	Reason    Reason                   `json:"reason,omitempty"`
	Message   string                   `json:"message,omitempty"`
	At        time.Time                `json:"at"`
}

// FailedVersions returns the versions of s.Failed, oldest first, as
// NodeFirmware.FailedVersions wants them. The caller owns the slice.
func (s *State) FailedVersions() []string {
	var vs []string
	for _, f := range s.Failed {
		vs = append(vs, f.Version)
	}
	return vs
}

// clone returns a deep copy of s, so pure functions never alias their input.
func (s *State) clone() *State {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("updater: marshal state: %v", err))
	}
	var c State
	if err := json.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("updater: unmarshal state: %v", err))
	}
	return &c
}

// encodeState returns s as the state file's bytes.
func encodeState(s *State) ([]byte, error) {
	s.Format = stateFormat
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	if len(b) > MaxStateBytes {
		return nil, fmt.Errorf("encode state: %d bytes, over %d", len(b), MaxStateBytes)
	}
	return append(b, '\n'), nil
}

// decodeState decodes and validates a state file of at most MaxStateBytes:
// strict JSON (no unknown fields, no trailing data).
func decodeState(r io.Reader) (*State, error) {
	data, err := limitread.All(r, MaxStateBytes)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s State
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data")
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// validate checks what the rest of the package relies on.
func (s *State) validate() error {
	if s.Format != stateFormat {
		return fmt.Errorf("format %d, want %d", s.Format, stateFormat)
	}
	if err := checkText("agent component", s.AgentComponent, true); err != nil {
		return err
	}
	for _, sl := range []*Slot{s.Committed, s.Previous} {
		if sl == nil {
			continue
		}
		if sl.Slot != SlotA && sl.Slot != SlotB && sl.Slot != SlotInstalled {
			return fmt.Errorf("slot %q", sl.Slot)
		}
		if err := checkOptionalVersion(sl.Version); err != nil {
			return err
		}
		if err := checkText("release", sl.Release, true); err != nil {
			return err
		}
	}
	if s.Committed != nil && s.Committed.Slot == SlotInstalled {
		return errors.New("committed slot is empty")
	}
	if t := s.Trial; t != nil {
		if t.Slot != SlotA && t.Slot != SlotB {
			return fmt.Errorf("trial slot %q", t.Slot)
		}
		if s.Committed != nil && s.Committed.Slot == t.Slot {
			return errors.New("trial and committed share a slot")
		}
		if err := checkVersion(t.Version); err != nil {
			return err
		}
		if err := checkText("release", t.Release, true); err != nil {
			return err
		}
		if t.Window <= 0 || t.Window > maxWindow || t.Boots < 0 || t.MaxBoots < 1 || t.MaxBoots > 100 || t.Boots > t.MaxBoots {
			return fmt.Errorf("trial window %v boots %d/%d", t.Window, t.Boots, t.MaxBoots)
		}
	}
	if err := checkOptionalVersion(s.Highest); err != nil {
		return err
	}
	if len(s.Failed) > MaxFailed {
		return fmt.Errorf("%d failed versions, over %d", len(s.Failed), MaxFailed)
	}
	for _, f := range s.Failed {
		if err := checkVersion(f.Version); err != nil {
			return err
		}
		for _, v := range []string{f.Release, f.Component, string(f.Reason), f.Message} {
			if err := checkText("failure", v, true); err != nil {
				return err
			}
		}
	}
	if len(s.Files) > MaxFiles {
		return fmt.Errorf("%d file components, over %d", len(s.Files), MaxFiles)
	}
	seen := map[string]bool{}
	for _, f := range s.Files {
		if f == nil {
			return errors.New("null file record")
		}
		if err := checkText("component", f.Name, false); err != nil {
			return err
		}
		if seen[f.Name] {
			return fmt.Errorf("file component %q twice", f.Name)
		}
		seen[f.Name] = true
		if f.Committed != nil {
			if err := f.Committed.validate(); err != nil {
				return err
			}
		}
		if t := f.Trial; t != nil {
			if err := t.FileState.validate(); err != nil {
				return err
			}
			if t.Phase != PhaseInstalling && t.Phase != PhaseInstalled {
				return fmt.Errorf("file trial phase %q", t.Phase)
			}
			if t.Window <= 0 || t.Window > maxWindow {
				return fmt.Errorf("file trial window %v", t.Window)
			}
		}
	}
	if o := s.LastOutcome; o != nil {
		for _, v := range []string{o.Component, o.Release, string(o.State), string(o.Reason), o.Message} {
			if err := checkText("outcome", v, true); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *FileState) validate() error {
	if err := checkVersion(f.Version); err != nil {
		return err
	}
	if err := checkText("release", f.Release, true); err != nil {
		return err
	}
	if !isHexDigest(f.SHA256) || f.Size < 1 {
		return fmt.Errorf("file artifact size %d sha256 %q", f.Size, f.SHA256)
	}
	return nil
}

func checkVersion(v string) error {
	if _, err := manifest.CompareVersions(v, v); err != nil {
		return err
	}
	return nil
}

func checkOptionalVersion(v string) error {
	if v == "" {
		return nil
	}
	return checkVersion(v)
}

// checkText accepts printable text without control characters (names and
// messages reach an environment variable and a status report).
func checkText(what, s string, empty bool) error {
	if s == "" && !empty {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > maxText {
		return fmt.Errorf("%s is over %d bytes", what, maxText)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return fmt.Errorf("%s %q has a control or invalid character", what, s)
		}
	}
	return nil
}

func isHexDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
