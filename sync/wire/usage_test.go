package wire

import (
	"errors"
	"fmt"
	"testing"
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

// FuzzUnmarshalUsage: any body decodes as a Usage within the limits, or
// fails, and what decodes encodes and decodes again alike.
func FuzzUnmarshalUsage(f *testing.F) {
	f.Add(Marshal(sampleUsage()))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Unmarshal(TypeUsage, b)
		if err != nil {
			return
		}
		u := m.(*Usage)
		if len(u.Pods) > MaxUsagePods {
			t.Fatalf("%d pods decoded", len(u.Pods))
		}
		if _, err := Unmarshal(TypeUsage, Marshal(u)); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
