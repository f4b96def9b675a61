package badgerstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// TestReleaseSealedValueLogs: paging out sealed value logs finds badger's
// mappings, and every value reads back intact afterwards.
func TestReleaseSealedValueLogs(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ValueLogFileSize = 1 << 20
	cfg.ReleaseValueLogPages = false // called by hand below
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	val := bytes.Repeat([]byte("v"), 4096)
	for i := 0; i < 1000; i++ { // 4 MiB: several sealed files
		if _, err := s.Create(ctx, fmt.Sprintf("/v/%04d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	n, err := releaseSealedValueLogs(s.cfg.Dir)
	if err != nil {
		t.Fatalf("releaseSealedValueLogs = %v", err)
	}
	if n < 2<<20 {
		t.Fatalf("advised %d bytes, want the sealed value logs (> 2 MiB)", n)
	}
	for i := 0; i < 1000; i++ {
		kv, err := s.Get(ctx, fmt.Sprintf("/v/%04d", i), 0)
		if err != nil || !bytes.Equal(kv.Value, val) {
			t.Fatalf("Get after page-out = %d bytes, %v", len(kv.Value), err)
		}
	}
}
