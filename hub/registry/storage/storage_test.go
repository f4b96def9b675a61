package storage

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
)

var (
	created = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = created.Add(26 * time.Hour)
)

func rulesFor(kind string) typed.All {
	for _, r := range ResourcesWithClock(func() time.Time { return now }) {
		if r.Kind == kind {
			return r.Rules.(typed.All)
		}
	}
	panic("no resource " + kind)
}

func errStrings(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, fmt.Sprintf("%s: %s", e.Field, e.Type))
	}
	slices.Sort(out)
	return out
}

func sameErrs(got, want []string) bool {
	slices.Sort(want)
	return reflect.DeepEqual(got, want) || len(got) == 0 && len(want) == 0
}

type testCase struct {
	name string
	obj  runtime.Object
	want []string
}

func checkCreate(t *testing.T, kind string, cases []testCase) {
	t.Helper()
	r := rulesFor(kind)
	for _, tc := range cases {
		r.Default(tc.obj)
		r.PrepareForCreate(tc.obj)
		if got := errStrings(r.Validate(tc.obj)); !sameErrs(got, tc.want) {
			t.Errorf("%s: Validate(%s) = %q, want %q", kind, tc.name, got, tc.want)
		}
	}
}

// checkUpdate updates a defaulted, stored copy of old with edit.
func checkUpdate[T interface {
	runtime.Object
	metav1.Object
}](t *testing.T, kind string, old T, cases []struct {
	name string
	edit func(T)
	want []string
}) {
	t.Helper()
	r := rulesFor(kind)
	r.Default(old)
	r.PrepareForCreate(old)
	old.SetResourceVersion("5")
	for _, tc := range cases {
		obj := old.DeepCopyObject().(T)
		tc.edit(obj)
		r.Default(obj)
		r.PrepareForUpdate(obj, old)
		if got := errStrings(r.ValidateUpdate(obj, old)); !sameErrs(got, tc.want) {
			t.Errorf("%s: ValidateUpdate(%s) = %q, want %q", kind, tc.name, got, tc.want)
		}
	}
}

func class(mutate func(*storagev1.StorageClass)) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "local-path", CreationTimestamp: metav1.NewTime(created)},
		Provisioner: "rancher.io/local-path",
		Parameters:  map[string]string{"nodePath": "/var/lib/outpost/volumes"},
	}
	if mutate != nil {
		mutate(sc)
	}
	return sc
}

func driver(mutate func(*storagev1.CSIDriver)) *storagev1.CSIDriver {
	d := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.csi.example.com", CreationTimestamp: metav1.NewTime(created)}}
	if mutate != nil {
		mutate(d)
	}
	return d
}

func attachment(mutate func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
	va := &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-123", CreationTimestamp: metav1.NewTime(created)},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: "disk.csi.example.com", NodeName: "edge-1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: new("disk-1")}},
	}
	if mutate != nil {
		mutate(va)
	}
	return va
}

func TestDefaults(t *testing.T) {
	sc := class(nil)
	rulesFor("StorageClass").Default(sc)
	if *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete || *sc.VolumeBindingMode != storagev1.VolumeBindingImmediate {
		t.Errorf("Default(class) = %+v, want Delete, Immediate", sc)
	}
	d := driver(nil)
	rulesFor("CSIDriver").Default(d)
	want := storagev1.CSIDriverSpec{
		AttachRequired: new(true), PodInfoOnMount: new(false), StorageCapacity: new(false),
		FSGroupPolicy:        new(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy),
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		RequiresRepublish:    new(false), SELinuxMount: new(false),
	}
	if !reflect.DeepEqual(d.Spec, want) {
		t.Errorf("Default(driver) = %+v, want %+v", d.Spec, want)
	}
}

func TestValidateStorageClass(t *testing.T) {
	checkCreate(t, "StorageClass", []testCase{
		{"valid", class(nil), nil},
		{"topologies", class(func(sc *storagev1.StorageClass) {
			sc.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
				{Key: "topology.kubernetes.io/zone", Values: []string{"site-a", "site-b"}}}}}
		}), nil},
		{"no provisioner", class(func(sc *storagev1.StorageClass) { sc.Provisioner = "" }), []string{"provisioner: Required value"}},
		{"bad provisioner", class(func(sc *storagev1.StorageClass) { sc.Provisioner = "local path" }), []string{"provisioner: Invalid value"}},
		{"recycle", class(func(sc *storagev1.StorageClass) { sc.ReclaimPolicy = new(corev1.PersistentVolumeReclaimRecycle) }),
			[]string{"reclaimPolicy: Unsupported value"}},
		{"binding mode", class(func(sc *storagev1.StorageClass) { sc.VolumeBindingMode = new(storagev1.VolumeBindingMode("Later")) }),
			[]string{"volumeBindingMode: Unsupported value"}},
		{"empty parameter key", class(func(sc *storagev1.StorageClass) { sc.Parameters[""] = "x" }), []string{"parameters: Invalid value"}},
		{"duplicate topology values", class(func(sc *storagev1.StorageClass) {
			sc.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
				{Key: "zone", Values: []string{"a", "a"}}, {Key: "rack"}}}}
		}), []string{"allowedTopologies[0].matchLabelExpressions[0].values[1]: Duplicate value",
			"allowedTopologies[0].matchLabelExpressions[1].values: Required value"}},
	})
	checkUpdate(t, "StorageClass", class(nil), []struct {
		name string
		edit func(*storagev1.StorageClass)
		want []string
	}{
		{"default annotation", func(sc *storagev1.StorageClass) { sc.Annotations = map[string]string{DefaultClassAnnotation: "true"} }, nil},
		{"expansion", func(sc *storagev1.StorageClass) { sc.AllowVolumeExpansion = new(true) }, nil},
		{"provisioner", func(sc *storagev1.StorageClass) { sc.Provisioner = "example.com/nfs" }, []string{"provisioner: Forbidden"}},
		{"parameters", func(sc *storagev1.StorageClass) { sc.Parameters = nil }, []string{"parameters: Forbidden"}},
		{"reclaim policy", func(sc *storagev1.StorageClass) { sc.ReclaimPolicy = new(corev1.PersistentVolumeReclaimRetain) },
			[]string{"reclaimPolicy: Forbidden"}},
		{"binding mode", func(sc *storagev1.StorageClass) {
			sc.VolumeBindingMode = new(storagev1.VolumeBindingWaitForFirstConsumer)
		},
			[]string{"volumeBindingMode: Invalid value"}},
	})
}

func TestValidateCSI(t *testing.T) {
	checkCreate(t, "CSIDriver", []testCase{
		{"valid", driver(nil), nil},
		{"tokens", driver(func(d *storagev1.CSIDriver) {
			d.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "vault"}, {Audience: "gcp", ExpirationSeconds: new(int64(3600))}}
			d.Spec.ServiceAccountTokenInSecrets = new(true)
		}), nil},
		{"short token", driver(func(d *storagev1.CSIDriver) {
			d.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "vault", ExpirationSeconds: new(int64(60))}, {Audience: "vault"}}
		}), []string{"spec.tokenRequests[0].expirationSeconds: Invalid value", "spec.tokenRequests[1].audience: Duplicate value"}},
		{"token in secrets without tokens", driver(func(d *storagev1.CSIDriver) { d.Spec.ServiceAccountTokenInSecrets = new(true) }),
			[]string{"spec.serviceAccountTokenInSecrets: Invalid value"}},
		{"fsGroupPolicy", driver(func(d *storagev1.CSIDriver) { d.Spec.FSGroupPolicy = new(storagev1.FSGroupPolicy("Always")) }),
			[]string{"spec.fsGroupPolicy: Unsupported value"}},
		{"mode", driver(func(d *storagev1.CSIDriver) {
			d.Spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{"Forever"}
		}), []string{"spec.volumeLifecycleModes: Unsupported value"}},
		{"update period", driver(func(d *storagev1.CSIDriver) { d.Spec.NodeAllocatableUpdatePeriodSeconds = new(int64(5)) }),
			[]string{"spec.nodeAllocatableUpdatePeriodSeconds: Invalid value"}},
	})
	checkUpdate(t, "CSIDriver", driver(nil), []struct {
		name string
		edit func(*storagev1.CSIDriver)
		want []string
	}{
		{"pod info", func(d *storagev1.CSIDriver) { d.Spec.PodInfoOnMount = new(true) }, nil},
		{"attach", func(d *storagev1.CSIDriver) { d.Spec.AttachRequired = new(false) }, []string{"spec.attachedRequired: Invalid value"}},
		{"modes", func(d *storagev1.CSIDriver) {
			d.Spec.VolumeLifecycleModes = append(d.Spec.VolumeLifecycleModes, storagev1.VolumeLifecycleEphemeral)
		}, []string{"spec.volumeLifecycleModes: Invalid value"}},
	})

	node := func(drivers ...storagev1.CSINodeDriver) *storagev1.CSINode {
		return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}, Spec: storagev1.CSINodeSpec{Drivers: drivers}}
	}
	disk := storagev1.CSINodeDriver{Name: "disk.csi.example.com", NodeID: "edge-1", TopologyKeys: []string{"topology.kubernetes.io/zone"}}
	checkCreate(t, "CSINode", []testCase{
		{"valid", node(disk), nil},
		{"no node id", node(storagev1.CSINodeDriver{Name: "disk.csi.example.com"}), []string{"spec.drivers[0].nodeID: Required value"}},
		{"twice", node(disk, disk), []string{"spec.drivers[1].name: Duplicate value"}},
	})
	checkUpdate(t, "CSINode", node(disk), []struct {
		name string
		edit func(*storagev1.CSINode)
		want []string
	}{
		{"allocatable", func(n *storagev1.CSINode) {
			n.Spec.Drivers[0].Allocatable = &storagev1.VolumeNodeResources{Count: new(int32(8))}
		}, nil},
		{"node id", func(n *storagev1.CSINode) { n.Spec.Drivers[0].NodeID = "edge-2" }, []string{"spec.drivers: Invalid value"}},
	})
}

func TestValidateVolumeAttachment(t *testing.T) {
	checkCreate(t, "VolumeAttachment", []testCase{
		{"valid", attachment(nil), nil},
		{"no source", attachment(func(va *storagev1.VolumeAttachment) { va.Spec.Source = storagev1.VolumeAttachmentSource{} }),
			[]string{"spec.source: Required value"}},
		{"inline without csi", attachment(func(va *storagev1.VolumeAttachment) {
			va.Spec.Source = storagev1.VolumeAttachmentSource{InlineVolumeSpec: &corev1.PersistentVolumeSpec{
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}},
			}}
		}), []string{"spec.source.inlineVolumeSpec.csi: Required value"}},
		{"no attacher or node", attachment(func(va *storagev1.VolumeAttachment) { va.Spec.Attacher, va.Spec.NodeName = "", "" }),
			[]string{"spec.attacher: Required value", "spec.nodeName: Invalid value"}},
	})
	checkUpdate(t, "VolumeAttachment", attachment(nil), []struct {
		name string
		edit func(*storagev1.VolumeAttachment)
		want []string
	}{
		{"labels", func(va *storagev1.VolumeAttachment) { va.Labels = map[string]string{"a": "b"} }, nil},
		{"node", func(va *storagev1.VolumeAttachment) { va.Spec.NodeName = "edge-2" }, []string{"spec: Invalid value"}},
	})
	sv := rulesFor("VolumeAttachment").(apiserver.StatusValidator)
	old := attachment(func(va *storagev1.VolumeAttachment) { va.ResourceVersion = "5" })
	va := old.DeepCopy()
	va.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachError: &storagev1.VolumeError{ErrorCode: new(int32(-1))}}
	if got := errStrings(sv.ValidateStatusUpdate(va, old)); !sameErrs(got, []string{"status.attachError.errorCode: Invalid value"}) {
		t.Errorf("ValidateStatusUpdate(negative error code) = %q", got)
	}
}

func TestRows(t *testing.T) {
	sc := class(func(sc *storagev1.StorageClass) { sc.Annotations = map[string]string{DefaultClassAnnotation: "true"} })
	rulesFor("StorageClass").Default(sc)
	d := driver(nil)
	rulesFor("CSIDriver").Default(d)
	va := attachment(nil)
	va.Status.Attached = true
	for _, tc := range []struct {
		kind string
		obj  runtime.Object
		want []interface{}
	}{
		{"StorageClass", sc, []interface{}{"local-path (default)", "rancher.io/local-path", "Delete", "Immediate", false, "26h"}},
		{"CSIDriver", d, []interface{}{"disk.csi.example.com", true, false, false, "<unset>", false, "Persistent", "26h"}},
		{"CSINode", &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", CreationTimestamp: metav1.NewTime(created)},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "a"}, {Name: "b"}}}}, []interface{}{"edge-1", int64(2), "26h"}},
		{"VolumeAttachment", va, []interface{}{"csi-123", "disk.csi.example.com", "disk-1", "edge-1", true, "26h"}},
	} {
		if got := rulesFor(tc.kind).Row(tc.obj); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Row = %#v, want %#v", tc.kind, got, tc.want)
		}
	}
	var names []string
	for _, c := range rulesFor("StorageClass").Columns() {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Provisioner", "ReclaimPolicy", "VolumeBindingMode", "AllowVolumeExpansion", "Age"}; !reflect.DeepEqual(names, want) {
		t.Errorf("StorageClass columns = %q, want %q", names, want)
	}
}

// TestWrongType: the rules, given an object of another type, neither
// panic nor accept it.
func TestWrongType(t *testing.T) { typedtest.WrongType(t, Resources()) }
