package checkpoint

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// BenchmarkScan scans 10,000 objects of 600 bytes on disk, as the service
// proxy scans a large cluster's EndpointSlices at each rebuild; B/op is
// what one scan allocates.
func BenchmarkScan(b *testing.B) {
	s, err := Open(b.TempDir(), DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	raw := []byte(strings.Repeat("x", 600))
	const n = 10000
	for start := 0; start < n; start += 500 {
		changes := make([]wire.Change, 0, 500)
		for i := start; i < start+500; i++ {
			k := wire.Key{Resource: wire.ResourceEndpointSlices, Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i)}
			changes = append(changes, wire.Change{Op: wire.OpPut, Key: k, Revision: int64(i + 1), Object: raw})
		}
		if err := s.ApplyBatch(changes, int64(start+500)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		seen, size := 0, 0
		err := s.Scan(wire.ResourceEndpointSlices, func(o Object) { seen++; size += len(o.Raw) })
		if err != nil || seen != n || size != n*len(raw) {
			b.Fatalf("Scan saw %d objects of %d bytes, %v; want %d of %d", seen, size, err, n, n*len(raw))
		}
	}
}
