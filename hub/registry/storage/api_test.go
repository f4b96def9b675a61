package storage_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// TestStorageAPI: the four resources are created with upstream's
// defaults, refused and kept immutable where upstream does, and printed
// with upstream's columns.
func TestStorageAPI(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	st := h.Client.StorageV1()

	sc, err := st.StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "local-path", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "rancher.io/local-path",
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create storageclass: %v", err)
	}
	if *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete || *sc.VolumeBindingMode != storagev1.VolumeBindingImmediate {
		t.Errorf("created storageclass: %v, %v; want Delete, Immediate", *sc.ReclaimPolicy, *sc.VolumeBindingMode)
	}
	sc.Provisioner = "example.com/nfs"
	_, err = st.StorageClasses().Update(ctx, sc, metav1.UpdateOptions{})
	if got := typedtest.Causes(t, "change a class's provisioner", err); !slices.Contains(got, "provisioner") {
		t.Errorf("change a class's provisioner: causes %v, want provisioner", got)
	}
	_, err = st.StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "none"}}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create a class without provisioner", err); !slices.Contains(got, "provisioner") {
		t.Errorf("create a class without provisioner: causes %v, want provisioner", got)
	}

	d, err := st.CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "disk.csi.example.com"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create csidriver: %v", err)
	}
	if !*d.Spec.AttachRequired || *d.Spec.PodInfoOnMount || *d.Spec.FSGroupPolicy != storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy ||
		!reflect.DeepEqual(d.Spec.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}) {
		t.Errorf("created csidriver: %+v, want upstream's defaults", d.Spec)
	}
	if _, err := st.CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: d.Name, NodeID: "edge-1"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create csinode: %v", err)
	}
	va, err := st.VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "csi-123"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: d.Name, NodeName: "edge-1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: new("disk-1")}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create volumeattachment: %v", err)
	}
	if va.Status.Attached {
		t.Errorf("created volumeattachment is attached; a client may not set status on create")
	}
	va.Status.Attached = true
	if va, err = st.VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil || !va.Status.Attached {
		t.Fatalf("mark volumeattachment attached = %+v, %v", va, err)
	}

	for _, tc := range []struct {
		path string
		want []string
	}{
		{"storageclasses", []string{"Name", "Provisioner", "ReclaimPolicy", "VolumeBindingMode", "AllowVolumeExpansion", "Age"}},
		{"csidrivers", []string{"Name", "AttachRequired", "PodInfoOnMount", "StorageCapacity", "TokenRequests", "RequiresRepublish", "Modes", "Age"}},
		{"csinodes", []string{"Name", "Drivers", "Age"}},
		{"volumeattachments", []string{"Name", "Attacher", "PV", "Node", "Attached", "Age"}},
	} {
		tbl := typedtest.Table(t, st.RESTClient(), "/apis/storage.k8s.io/v1/"+tc.path)
		names := typedtest.ColumnNames(tbl)
		if !reflect.DeepEqual(names, tc.want) || len(tbl.Rows) != 1 {
			t.Errorf("%s as a Table: columns %q, %d rows; want %q, 1", tc.path, names, len(tbl.Rows), tc.want)
		}
		if tc.path == "storageclasses" && len(tbl.Rows) == 1 && tbl.Rows[0].Cells[0] != "local-path (default)" {
			t.Errorf("default class printed as %v, want local-path (default)", tbl.Rows[0].Cells[0])
		}
	}
}
