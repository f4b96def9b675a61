package wire

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestUsageLimits(t *testing.T) {
	big := &Usage{}
	for i := range MaxUsagePods + 1 {
		big.Pods = append(big.Pods, PodUsage{Namespace: "ns", Name: fmt.Sprint("p", i)})
	}
	if _, err := Unmarshal(TypeUsage, Marshal(big)); !errors.Is(err, ErrMalformed) {
		t.Errorf("Unmarshal(%d pods) = %v, want ErrMalformed", len(big.Pods), err)
	}
	wide := &Usage{Pods: []PodUsage{{Namespace: "ns", Name: "p"}}}
	for i := range MaxUsageContainers + 1 {
		wide.Pods[0].Containers = append(wide.Pods[0].Containers, ContainerUsage{Name: fmt.Sprint("c", i)})
	}
	if _, err := Unmarshal(TypeUsage, Marshal(wide)); !errors.Is(err, ErrMalformed) {
		t.Errorf("Unmarshal(%d containers) = %v, want ErrMalformed", len(wide.Pods[0].Containers), err)
	}
	for _, bad := range []*Usage{
		{Pods: []PodUsage{{Name: "p"}}},
		{Pods: []PodUsage{{Namespace: "ns", Name: "p", Containers: []ContainerUsage{{}}}}},
	} {
		if _, err := Unmarshal(TypeUsage, Marshal(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Unmarshal(%+v) = %v, want ErrMalformed", bad, err)
		}
	}
}

// TestRelayUsageLimits: a hub takes the relay counters of at most
// MaxUsageRelayPeers peers, each once, each with an address of 4 or 16
// bytes.
func TestRelayUsageLimits(t *testing.T) {
	full := &Usage{}
	for i := range MaxUsageRelayPeers {
		full.Relay = append(full.Relay, RelayUsage{Peer: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Up: uint64(i)})
	}
	if m, err := Unmarshal(TypeUsage, Marshal(full)); err != nil || !reflect.DeepEqual(m, full) {
		t.Errorf("Unmarshal(%d relay peers) = %v; want it as sent", len(full.Relay), err)
	}
	over := &Usage{Relay: append(full.Relay, RelayUsage{Peer: netip.MustParseAddr("fd00::1")})}
	if _, err := Unmarshal(TypeUsage, Marshal(over)); !errors.Is(err, ErrMalformed) {
		t.Errorf("Unmarshal(%d relay peers) = %v, want ErrMalformed", len(over.Relay), err)
	}
	twice := &Usage{Relay: []RelayUsage{{Peer: netip.MustParseAddr("192.168.7.12"), Up: 1}, {Peer: netip.MustParseAddr("192.168.7.12"), Up: 2}}}
	if _, err := Unmarshal(TypeUsage, Marshal(twice)); !errors.Is(err, ErrMalformed) {
		t.Errorf("Unmarshal(a peer twice) = %v, want ErrMalformed", err)
	}
	// Peer addresses the encoder never writes: none, empty, 5 bytes.
	for _, peer := range [][]byte{nil, {}, {192, 168, 7, 12, 1}} {
		var e enc
		e.message(6, func(e *enc) {
			if peer != nil {
				e.b = protowire.AppendTag(e.b, 1, protowire.BytesType)
				e.b = protowire.AppendBytes(e.b, peer)
			}
			e.uint(2, 100)
		})
		if _, err := Unmarshal(TypeUsage, e.b); !errors.Is(err, ErrMalformed) {
			t.Errorf("Unmarshal(relay peer %x) = %v, want ErrMalformed", peer, err)
		}
	}
}

// TestRelayUsageSkipped: the relay counters follow the fields a build
// of before them knows, as fields 6 only, which such a build skips.
func TestRelayUsageSkipped(t *testing.T) {
	u := sampleRelayUsage()
	want := *u
	want.Relay = nil
	all, known := Marshal(u), Marshal(&want)
	if !bytes.HasPrefix(all, known) {
		t.Fatalf("the relay counters do not follow the fields an older build knows")
	}
	var n int
	err := eachField(all[len(known):], func(f field) error {
		if f.num != 6 || f.typ != protowire.BytesType {
			return fmt.Errorf("field %d of type %v after the known ones", f.num, f.typ)
		}
		n++
		return nil
	})
	if err != nil || n != len(u.Relay) {
		t.Errorf("after the known fields: %d fields 6, %v; want %d", n, err, len(u.Relay))
	}
}

// FuzzUnmarshalUsage: any body decodes as a Usage within the limits, or
// fails, and what decodes encodes and decodes again alike.
func FuzzUnmarshalUsage(f *testing.F) {
	f.Add(Marshal(sampleUsage()))
	f.Add(Marshal(sampleRelayUsage()))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Unmarshal(TypeUsage, b)
		if err != nil {
			return
		}
		u := m.(*Usage)
		if len(u.Pods) > MaxUsagePods || len(u.Relay) > MaxUsageRelayPeers {
			t.Fatalf("%d pods, %d relay peers decoded", len(u.Pods), len(u.Relay))
		}
		for _, r := range u.Relay {
			if !r.Peer.IsValid() {
				t.Fatalf("relay peer %v decoded", r.Peer)
			}
		}
		again, err := Unmarshal(TypeUsage, Marshal(u))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if r := again.(*Usage).Relay; !reflect.DeepEqual(r, u.Relay) {
			t.Fatalf("relay counters re-decoded as %+v, first %+v", r, u.Relay)
		}
	})
}
