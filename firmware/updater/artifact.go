package updater

import (
	"fmt"
	"io/fs"
	"os"
)

// OpenArtifact opens an artifact the updater keeps whose sha256 is sha,
// lowercase hex: the agent in its committed slot or on trial, or a file
// component's stored artifact, committed or on trial. It is opened under
// the updater's lock, so it is the artifact the state names then, even if
// a later install replaces the path; the caller closes it. The agent's
// previous slot is not offered: an install interrupted by a power cut may
// have replaced it without a trace in the state. An error wrapping
// fs.ErrNotExist means the updater keeps no such artifact.
//
// The edge agent serves these to its site peers, which check every chunk
// against the signed manifest themselves.
func (u *Updater) OpenArtifact(sha string) (*os.File, error) {
	if !isSHA256Hex(sha) {
		return nil, fmt.Errorf("artifact %q: %w", sha, fs.ErrNotExist)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	s, err := u.load()
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", sha, err)
	}
	path, size := "", int64(-1)
	switch {
	case s.Trial != nil && s.Trial.SHA256 == sha && s.Trial.Slot != SlotInstalled:
		path, size = u.SlotPath(s.Trial.Slot), s.Trial.Size
	case s.Committed != nil && s.Committed.SHA256 == sha && s.Committed.Slot != SlotInstalled:
		path, size = u.SlotPath(s.Committed.Slot), s.Committed.Size
	default:
		for _, rec := range s.Files {
			for _, st := range []*FileState{rec.Committed, fileTrialState(rec.Trial)} {
				if st != nil && st.SHA256 == sha {
					path, size = u.filePath(rec.Name, sha), st.Size
				}
			}
		}
	}
	if path == "" {
		return nil, fmt.Errorf("artifact %s: %w", sha, fs.ErrNotExist)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", sha, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		f.Close()
		return nil, fmt.Errorf("artifact %s: not the size the state says: %w", sha, fs.ErrNotExist)
	}
	return f, nil
}

// fileTrialState is the artifact of a file trial, nil for none.
func fileTrialState(t *FileTrial) *FileState {
	if t == nil {
		return nil
	}
	return &t.FileState
}

// isSHA256Hex reports whether s is 64 lowercase hex digits.
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}
