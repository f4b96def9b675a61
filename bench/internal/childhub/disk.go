package childhub

import (
	"fmt"
	"io/fs"
	"path/filepath"
)

// DirSize returns the space the files under dir take on disk (allocated
// blocks, where the platform reports them) and the sum of their sizes.
func DirSize(dir string) (disk, apparent uint64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		apparent += uint64(info.Size())
		if blocks, ok := allocated(info); ok {
			disk += blocks
		} else {
			disk += uint64(info.Size())
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("measure data dir: %w", err)
	}
	return disk, apparent, nil
}
