package runtime

import "testing"

func TestPodRefString(t *testing.T) {
	if got, want := (PodRef{UID: "u1", Namespace: "default", Name: "web"}).String(), "default/web (u1)"; got != want {
		t.Errorf("PodRef.String() = %q, want %q", got, want)
	}
}

func TestPodStatusContainer(t *testing.T) {
	p := PodStatus{Containers: []ContainerStatus{{Name: "a"}, {Name: "b", Attempt: 2}}}
	if c := p.Container("b"); c == nil || c.Attempt != 2 {
		t.Errorf("PodStatus.Container(b) = %+v, want b with attempt 2", c)
	}
	if c := p.Container("c"); c != nil {
		t.Errorf("PodStatus.Container(c) = %+v, want nil", c)
	}
	p.Container("a").Attempt = 5
	if p.Containers[0].Attempt != 5 {
		t.Errorf("PodStatus.Container does not point into the pod status")
	}
}
