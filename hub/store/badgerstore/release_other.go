//go:build !linux

package badgerstore

// releaseSealedValueLogs is a no-op where MADV_PAGEOUT does not exist.
func releaseSealedValueLogs(dir string) (int64, error) { return 0, nil }
