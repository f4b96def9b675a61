package volumes

import (
	"errors"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAutomountTokenVolumeIsWire(t *testing.T) {
	if AutomountTokenVolume != wire.AutomountVolume {
		t.Fatalf("AutomountTokenVolume = %q, want wire.AutomountVolume %q", AutomountTokenVolume, wire.AutomountVolume)
	}
}

func TestFieldValue(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: "shop", UID: "u1",
		Labels:      map[string]string{"b": "2", "a": "1"},
		Annotations: map[string]string{"note": "say \"hi\"\nbye"},
	}}
	for _, tc := range []struct {
		path, want string
		err        bool
	}{
		{"metadata.name", "web", false},
		{"metadata.namespace", "shop", false},
		{"metadata.uid", "u1", false},
		{"metadata.labels", "a=\"1\"\nb=\"2\"", false},
		{"metadata.annotations", `note="say \"hi\"\nbye"`, false},
		{"metadata.labels['b']", "2", false},
		{"metadata.labels['none']", "", false},
		{"metadata.annotations['note']", "say \"hi\"\nbye", false},
		{"spec.nodeName", "", true},
		{"metadata.labels[", "", true},
		{"['x']", "", true},
	} {
		got, err := fieldValue(pod, tc.path)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("fieldValue(%q) = %q, %v; want %q, error %v", tc.path, got, err, tc.want, tc.err)
		}
	}
	if got := sortLines("say \"hi\"\nbye"); got != "bye\nsay \"hi\"" {
		t.Errorf("sortLines = %q", got)
	}
}

func TestResourceValue(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "app",
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			},
		}, {Name: "side"}},
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")},
		}}},
	}}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("10G"),
	}
	q := resource.MustParse
	for _, tc := range []struct {
		container, res string
		divisor        resource.Quantity
		want           string
		err            bool
	}{
		{"app", "limits.memory", resource.Quantity{}, "67108864", false},
		{"app", "limits.memory", q("1Mi"), "64", false},
		{"app", "limits.memory", q("1G"), "1", false}, // rounded up
		{"app", "limits.cpu", resource.Quantity{}, "4", false},
		{"app", "limits.cpu", q("1m"), "4000", false},
		{"app", "requests.cpu", q("1m"), "250", false},
		{"app", "requests.cpu", resource.Quantity{}, "1", false}, // 250m rounds up
		{"app", "requests.memory", q("1Mi"), "32", false},
		{"app", "limits.ephemeral-storage", q("1G"), "10", false},
		{"app", "requests.ephemeral-storage", resource.Quantity{}, "0", false},
		{"side", "limits.memory", q("1Gi"), "8", false},
		{"init", "limits.cpu", q("1m"), "1500", false},
		{"app", "requests.hugepages-2Mi", resource.Quantity{}, "0", false},
		{"app", "limits.nvidia.com/gpu", resource.Quantity{}, "", true},
		{"app", "cpu", resource.Quantity{}, "", true},
		{"ghost", "limits.cpu", resource.Quantity{}, "", true},
		{"", "limits.cpu", resource.Quantity{}, "", true}, // two containers
		{"app", "limits.cpu", q("-1"), "", true},
	} {
		ref := &corev1.ResourceFieldSelector{ContainerName: tc.container, Resource: tc.res, Divisor: tc.divisor}
		got, err := resourceValue(pod, ref, alloc)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("resourceValue(%s, %s, /%s) = %q, %v; want %q, error %v", tc.container, tc.res, tc.divisor.String(), got, err, tc.want, tc.err)
		}
	}
}

func TestKeysPayload(t *testing.T) {
	data := map[string][]byte{"a": []byte("A"), "b": []byte("B")}
	m := func(v int32) *int32 { return &v }
	p := payload{}
	if err := keysPayload(p, kindConfigMap, "ns", "cm", data, nil, m(0o600), false); err != nil {
		t.Fatal(err)
	}
	if len(p) != 2 || p["a"].mode != 0o600 || string(p["b"].data) != "B" {
		t.Errorf("all keys: %v", p)
	}
	p = payload{}
	items := []corev1.KeyToPath{{Key: "a", Path: "dir/x"}, {Key: "b", Path: "y", Mode: m(0o400)}}
	if err := keysPayload(p, kindConfigMap, "ns", "cm", data, items, nil, false); err != nil {
		t.Fatal(err)
	}
	if len(p) != 2 || p["dir/x"].mode != 0o644 || p["y"].mode != 0o400 {
		t.Errorf("items: %v", p)
	}
	items = append(items, corev1.KeyToPath{Key: "gone", Path: "z"})
	err := keysPayload(payload{}, kindSecret, "ns", "s", data, items, nil, false)
	var me *MissingError
	if !errors.Is(err, ErrMissingSource) || !errors.As(err, &me) || me.Key != "gone" || me.Kind != kindSecret {
		t.Errorf("missing key: %v", err)
	}
	if err := keysPayload(payload{}, kindSecret, "ns", "s", data, items, nil, true); err != nil {
		t.Errorf("missing key, optional: %v", err)
	}
}

func TestValidatePath(t *testing.T) {
	long := string(make([]byte, 256))
	for p, ok := range map[string]bool{
		"a": true, "a/b": true, "a/./b": true, ".hidden": true, "a/..b": true,
		"": false, "/a": false, "..": false, "a/../b": false, "..data": false, "..x/y": false,
		".": false, "./": false, "a\x00": false, long: false,
	} {
		if err := validatePath(p); (err == nil) != ok {
			t.Errorf("validatePath(%q) = %v, want ok %v", p, err, ok)
		}
	}
	if _, err := cleanPayload(payload{"a": {}, "a/b": {}}); err == nil {
		t.Error("cleanPayload accepted a path that is a file and a directory")
	}
}

func TestTmpfsSize(t *testing.T) {
	q := resource.MustParse
	alloc := corev1.ResourceList{corev1.ResourceMemory: q("1Gi")}
	limited := func(lims ...string) *corev1.Pod {
		p := &corev1.Pod{}
		for _, l := range lims {
			c := corev1.Container{}
			if l != "" {
				c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: q(l)}
			}
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
		return p
	}
	i64 := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		alloc corev1.ResourceList
		limit *int64
		want  int64
	}{
		{"allocatable", limited(""), alloc, nil, 1 << 30},
		{"no allocatable", limited(""), nil, nil, 0},
		{"pod limit", limited("64Mi", "64Mi"), alloc, nil, 128 << 20},
		{"one container unlimited", limited("64Mi", ""), alloc, nil, 1 << 30},
		{"sizeLimit", limited("64Mi"), alloc, i64(1 << 20), 1 << 20},
		{"sizeLimit over pod limit", limited("64Mi"), alloc, i64(1 << 30), 64 << 20},
		{"sizeLimit without allocatable", limited(""), nil, i64(1 << 20), 1 << 20},
		{"zero sizeLimit", limited(""), alloc, i64(0), 1 << 30},
	} {
		if got := tmpfsSize(tc.pod, tc.alloc, tc.limit); got != tc.want {
			t.Errorf("%s: tmpfsSize = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestAutomounts(t *testing.T) {
	f, tr := false, true
	mnt := corev1.VolumeMount{Name: "x", MountPath: AutomountPath}
	pod := func(auto *bool, vols []string, mounts ...[]corev1.VolumeMount) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{AutomountServiceAccountToken: auto}}
		for _, v := range vols {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: v})
		}
		for _, m := range mounts {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", VolumeMounts: m})
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		sa   *bool
		want bool
	}{
		{"default", pod(nil, nil, nil), nil, true},
		{"pod false", pod(&f, nil, nil), nil, false},
		{"pod true, sa false", pod(&tr, nil, nil), &f, true},
		{"sa false", pod(nil, nil, nil), &f, false},
		{"has kube-api-access volume", pod(nil, []string{"kube-api-access-x1y2z"}, nil), nil, false},
		{"every container mounts there", pod(nil, nil, []corev1.VolumeMount{mnt}), nil, false},
		{"one container does not", pod(nil, nil, []corev1.VolumeMount{mnt}, nil), nil, true},
		{"no containers", pod(nil, nil), nil, false},
	} {
		if got := Automounts(tc.pod, tc.sa); got != tc.want {
			t.Errorf("%s: Automounts = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestExpandSubPath(t *testing.T) {
	env := []runtimeEnv{{"POD", "web-0"}, {"NS", "shop"}, {"POD", "web-1"}}
	for _, tc := range []struct {
		expr, want string
		err        bool
	}{
		{"$(POD)", "web-1", false},
		{"logs/$(NS)/$(POD)", "logs/shop/web-1", false},
		{"$$(POD)", "$(POD)", false},
		{"a$b", "a$b", false},
		{"$(POD", "$(POD", false},
		{"end$", "end$", false},
		{"$(NONE)", "", true},
	} {
		got, err := expandSubPath(tc.expr, toEnv(env))
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("expandSubPath(%q) = %q, %v; want %q, error %v", tc.expr, got, err, tc.want, tc.err)
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	in := "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"37 35 0:5 / /run/x rw - tmpfs tmpfs rw\n"
	got, err := parseMountInfo([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].mountPoint != "/mnt two" || got[0].fsType != "ext3" || got[1].fsType != "tmpfs" {
		t.Errorf("parseMountInfo = %+v", got)
	}
	if _, err := parseMountInfo([]byte("1 2 3\n")); err == nil {
		t.Error("parseMountInfo accepted a short line")
	}
	under := mountsUnder([]mountInfo{{mountPoint: "/p"}, {mountPoint: "/p/a"}, {mountPoint: "/pq"}, {mountPoint: "/p/a/b"}}, "/p")
	if len(under) != 3 || under[0] != "/p/a/b" || under[2] != "/p" {
		t.Errorf("mountsUnder = %v", under)
	}
}

func FuzzParseMountInfo(f *testing.F) {
	f.Add([]byte("36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 - ext3 /dev/root rw\n"))
	f.Add([]byte("1 2 3 4 5 6 - \\"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseMountInfo(b)
	})
}
