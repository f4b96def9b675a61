package core

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func validPV(mutate func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "disk-1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/disk-1"}},
		},
	}
	if mutate != nil {
		mutate(pv)
	}
	return pv
}

func validPVC(mutate func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if mutate != nil {
		mutate(pvc)
	}
	return pvc
}

func TestStorageDefaults(t *testing.T) {
	pv := create("persistentvolumes", validPV(nil))
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || *pv.Spec.VolumeMode != corev1.PersistentVolumeFilesystem ||
		pv.Status.Phase != corev1.VolumePending || pv.Status.LastPhaseTransitionTime == nil || !pv.Status.LastPhaseTransitionTime.Time.Equal(t0) ||
		*pv.Spec.HostPath.Type != corev1.HostPathUnset {
		t.Errorf("create(pv) = spec %+v, status %+v; want Retain, Filesystem, Pending since now", pv.Spec, pv.Status)
	}
	pvc := create("persistentvolumeclaims", validPVC(func(c *corev1.PersistentVolumeClaim) {
		c.Status.Phase = corev1.ClaimBound
	}))
	if *pvc.Spec.VolumeMode != corev1.PersistentVolumeFilesystem || pvc.Status.Phase != corev1.ClaimPending {
		t.Errorf("create(pvc) = spec %+v, status %+v; want Filesystem, Pending", pvc.Spec, pvc.Status)
	}
	// An ephemeral volume's claim template gets a claim's defaults.
	pod := validPod()
	pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1.0001")}}}},
	}}}}
	create("pods", pod)
	spec := pod.Spec.Volumes[0].Ephemeral.VolumeClaimTemplate.Spec
	if q := spec.Resources.Requests[corev1.ResourceStorage]; *spec.VolumeMode != corev1.PersistentVolumeFilesystem || q.String() != "1001m" {
		t.Errorf("Default(pod with ephemeral volume) = %+v, want Filesystem and 1001m", spec)
	}
}

func TestValidatePersistentVolume(t *testing.T) {
	affinity := &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"edge-1"}}},
	}}}}
	runValidate(t, "persistentvolumes", []validateCase{
		{"valid", validPV(nil), nil},
		{"local with affinity", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/ssd"}}
			pv.Spec.NodeAffinity = affinity
		}), nil},
		{"csi", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "disk.csi.example.com", VolumeHandle: "vol-1"}}
			pv.Spec.VolumeAttributesClassName = ptrTo("fast")
		}), nil},
		{"no capacity", validPV(func(pv *corev1.PersistentVolume) { pv.Spec.Capacity = nil }),
			want("spec.capacity: Required value", "spec.capacity: Unsupported value")},
		{"zero capacity", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("0")
		}), want("spec.capacity[storage]: Invalid value")},
		{"cpu capacity", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.Capacity[corev1.ResourceCPU] = resource.MustParse("1")
		}), want("spec.capacity: Unsupported value")},
		{"no access modes", validPV(func(pv *corev1.PersistentVolume) { pv.Spec.AccessModes = nil }), want("spec.accessModes: Required value")},
		{"RWOP with RWO", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.AccessModes = append(pv.Spec.AccessModes, corev1.ReadWriteOncePod)
		}), want("spec.accessModes: Forbidden")},
		{"no source", validPV(func(pv *corev1.PersistentVolume) { pv.Spec.HostPath = nil }), want("spec: Required value")},
		{"two sources", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.NFS = &corev1.NFSVolumeSource{Server: "nas", Path: "/export"}
		}), want("spec.nfs: Forbidden")},
		{"local without affinity", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/ssd"}}
		}), want("spec.nodeAffinity: Required value")},
		{"bad affinity", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpExists, Values: []string{"a"}}},
				MatchFields:      []corev1.NodeSelectorRequirement{{Key: "spec.nodeName", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
			}}}}
		}), want("spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values: Forbidden",
			"spec.nodeAffinity.required.nodeSelectorTerms[0].matchFields[0].key: Invalid value")},
		{"recycle root", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.HostPath.Path = "/"
			pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRecycle
		}), want("spec.persistentVolumeReclaimPolicy: Forbidden")},
		{"unknown policy", validPV(func(pv *corev1.PersistentVolume) { pv.Spec.PersistentVolumeReclaimPolicy = "Keep" }),
			want("spec.persistentVolumeReclaimPolicy: Unsupported value")},
		{"csi without handle", validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "disk.csi.example.com",
				NodePublishSecretRef: &corev1.SecretReference{Name: "creds"}}}
		}), want("spec.csi.volumeHandle: Required value", "spec.csi.nodePublishSecretRef.namespace: Required value")},
		{"attributes class without csi", validPV(func(pv *corev1.PersistentVolume) { pv.Spec.VolumeAttributesClassName = ptrTo("fast") }),
			want("spec.csi: Required value")},
		{"namespaced", validPV(func(pv *corev1.PersistentVolume) { pv.Namespace = "default" }), want("metadata.namespace: Forbidden")},
	})
}

func TestValidateInlineVolumeSpec(t *testing.T) {
	spec := validPV(nil).Spec
	got := summary(ValidateInlineVolumeSpec(&spec, field.NewPath("inlineVolumeSpec")))
	if w := want("inlineVolumeSpec.capacity: Forbidden", "inlineVolumeSpec.csi: Required value"); !sameLines(got, w) {
		t.Errorf("ValidateInlineVolumeSpec(hostPath volume) = %v, want %v", got, w)
	}
}

func TestValidatePersistentVolumeUpdate(t *testing.T) {
	runUpdate(t, "persistentvolumes", []updateCase{
		{"capacity", validPV(nil), validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("20Gi")
		}), nil},
		{"claim", validPV(nil), validPV(func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "data"}
		}), nil},
		{"source", validPV(nil), validPV(func(pv *corev1.PersistentVolume) { pv.Spec.HostPath.Path = "/srv/other" }),
			want("spec.persistentvolumesource: Forbidden")},
		{"volume mode", validPV(nil), validPV(func(pv *corev1.PersistentVolume) { pv.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeBlock) }),
			want("volumeMode: Invalid value")},
	})
}

func TestValidatePersistentVolumeClaim(t *testing.T) {
	runValidate(t, "persistentvolumeclaims", []validateCase{
		{"valid", validPVC(nil), nil},
		{"clone", validPVC(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "old"}
			c.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "old"}
		}), nil},
		{"no storage", validPVC(func(c *corev1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }),
			want("spec.resources[storage]: Required value")},
		{"no access modes", validPVC(func(c *corev1.PersistentVolumeClaim) { c.Spec.AccessModes = nil }),
			want("spec.accessModes: Required value")},
		{"bad class", validPVC(func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptrTo("Fast_SSD") }),
			want("spec.storageClassName: Invalid value")},
		{"snapshot in core group", validPVC(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "VolumeSnapshot", Name: "snap"}
		}), want("spec.dataSource: Invalid value")},
		{"mismatched sources", validPVC(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "a"}
			c.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "b"}
		}), want("spec: Invalid value")},
	})
}

func TestValidatePersistentVolumeClaimUpdate(t *testing.T) {
	bound := func(c *corev1.PersistentVolumeClaim) {
		c.Spec.VolumeName = "disk-1"
		c.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	}
	boundOld := func() *corev1.PersistentVolumeClaim {
		c := create("persistentvolumeclaims", validPVC(nil))
		c.ResourceVersion = "5"
		bound(c)
		return c
	}
	cases := []updateCase{
		{"bind", validPVC(nil), validPVC(func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "disk-1" }), nil},
		{"class from none", validPVC(nil), validPVC(func(c *corev1.PersistentVolumeClaim) { c.Spec.StorageClassName = ptrTo("fast") }), nil},
		{"grow unbound", validPVC(nil), validPVC(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		}), want("spec: Forbidden")},
		{"access modes", validPVC(nil), validPVC(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}), want("spec: Forbidden")},
		{"class annotation", validPVC(func(c *corev1.PersistentVolumeClaim) {
			c.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: "slow"}
		}), validPVC(func(c *corev1.PersistentVolumeClaim) {
			c.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: "fast"}
		}), want("metadata.annotations.volume.beta.kubernetes.io/storage-class: Invalid value")},
	}
	runUpdate(t, "persistentvolumeclaims", cases)

	// Expansion: a bound claim may grow, and shrink no lower than its
	// capacity.
	rules := rulesFor("persistentvolumeclaims")
	for _, tc := range []struct {
		size string
		want []string
	}{
		{"2Gi", nil},
		{"1Gi", nil},
		{"512Mi", want("spec.resources.requests.storage: Forbidden")},
	} {
		old := boundOld()
		pvc := old.DeepCopy()
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(tc.size)
		rules.PrepareForUpdate(pvc, old)
		if got := summary(rules.ValidateUpdate(pvc, old)); !sameLines(got, tc.want) {
			t.Errorf("ValidateUpdate(bound claim to %s) = %v, want %v", tc.size, got, tc.want)
		}
	}
}

func TestStorageRows(t *testing.T) {
	created := ago(26 * time.Hour)
	pv := create("persistentvolumes", validPV(func(pv *corev1.PersistentVolume) {
		pv.CreationTimestamp = created
		pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany, corev1.ReadWriteOnce}
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "data"}
		pv.Spec.StorageClassName = "local"
	}))
	if got, w := row(t, "persistentvolumes", pv), "[disk-1 10Gi RWO,RWX Retain Pending default/data local <unset>  26h Filesystem]"; got != w {
		t.Errorf("Row(pv) = %s, want %s", got, w)
	}
	pvc := create("persistentvolumeclaims", validPVC(func(c *corev1.PersistentVolumeClaim) {
		c.CreationTimestamp = created
		c.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: "local"}
	}))
	if got, w := row(t, "persistentvolumeclaims", pvc), "[data Pending    local <unset> 26h Filesystem]"; got != w {
		t.Errorf("Row(pending pvc) = %s, want %s", got, w)
	}
	pvc.Spec.VolumeName = "disk-1"
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pv.Spec.AccessModes,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}}
	if got, w := row(t, "persistentvolumeclaims", pvc), "[data Bound disk-1 10Gi RWO,RWX local <unset> 26h Filesystem]"; got != w {
		t.Errorf("Row(bound pvc) = %s, want %s", got, w)
	}
}
