package podrefs

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ref(n string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: n} }

// everything is a pod that refers to something through every path Visit
// knows, each name telling the path.
func everything() *corev1.Pod {
	secretEnv := func(n string) []corev1.EnvVar {
		return []corev1.EnvVar{{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref(n)}}}}
	}
	cmEnv := func(n string) []corev1.EnvVar {
		return []corev1.EnvVar{{Name: "C", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref(n)}}}}
	}
	from := func(s, c string) []corev1.EnvFromSource {
		return []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref(s)}}, {ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref(c)}}}
	}
	vol := func(name string, s corev1.VolumeSource) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: s}
	}
	sref := func(n string) *corev1.LocalObjectReference { r := ref(n); return &r }
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: corev1.PodSpec{
			ImagePullSecrets: []corev1.LocalObjectReference{ref("pull"), ref("")},
			InitContainers:   []corev1.Container{{Env: append(secretEnv("init-env"), cmEnv("init-env")...), EnvFrom: from("init-from", "init-from")}},
			Containers: []corev1.Container{{
				Env:     append(secretEnv("env"), corev1.EnvVar{Name: "F", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}),
				EnvFrom: from("from", "from"),
			}, {Env: cmEnv("env")}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{EnvFrom: from("debug", "debug")}}},
			Volumes: []corev1.Volume{
				vol("secret", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol"}}),
				vol("cm", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("vol")}}),
				vol("projected", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{Secret: &corev1.SecretProjection{LocalObjectReference: ref("projected")}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("projected")}},
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				}}}),
				vol("azure", corev1.VolumeSource{AzureFile: &corev1.AzureFileVolumeSource{SecretName: "azure"}}),
				vol("cephfs", corev1.VolumeSource{CephFS: &corev1.CephFSVolumeSource{SecretRef: sref("cephfs")}}),
				vol("cinder", corev1.VolumeSource{Cinder: &corev1.CinderVolumeSource{SecretRef: sref("cinder")}}),
				vol("flex", corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{SecretRef: sref("flex")}}),
				vol("rbd", corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{SecretRef: sref("rbd")}}),
				vol("scaleio", corev1.VolumeSource{ScaleIO: &corev1.ScaleIOVolumeSource{SecretRef: sref("scaleio")}}),
				vol("iscsi", corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{SecretRef: sref("iscsi")}}),
				vol("storageos", corev1.VolumeSource{StorageOS: &corev1.StorageOSVolumeSource{SecretRef: sref("storageos")}}),
				vol("csi", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: sref("csi")}}),
				vol("csi-none", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d"}}),
				vol("claim", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}),
				vol("scratch", corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}),
				vol("empty", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
			},
			ServiceAccountName: "app",
		},
	}
}

func visitAll(pod *corev1.Pod) []string {
	var got []string
	Visit(pod, func(resource, name string) bool {
		got = append(got, resource+"/"+name)
		return true
	})
	return got
}

func TestVisit(t *testing.T) {
	want := []string{
		"secrets/pull",
		"secrets/init-from", "secrets/init-env", "secrets/from", "secrets/env", "secrets/debug",
		"secrets/vol", "secrets/projected", "secrets/azure", "secrets/cephfs", "secrets/cinder", "secrets/flex",
		"secrets/rbd", "secrets/scaleio", "secrets/iscsi", "secrets/storageos", "secrets/csi",
		"configmaps/init-from", "configmaps/init-env", "configmaps/from", "configmaps/env", "configmaps/debug",
		"configmaps/vol", "configmaps/projected", "configmaps/kube-root-ca.crt",
		"serviceaccounts/app",
		"persistentvolumeclaims/data", "persistentvolumeclaims/web-scratch",
	}
	if got := visitAll(everything()); !slices.Equal(got, want) {
		t.Errorf("Visit =\n%q\nwant\n%q", got, want)
	}
}

func TestVisitServiceAccount(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"named", corev1.PodSpec{ServiceAccountName: "app", DeprecatedServiceAccount: "old"}, "serviceaccounts/app"},
		{"deprecated field only", corev1.PodSpec{DeprecatedServiceAccount: "old"}, "serviceaccounts/old"},
		{"none: the default", corev1.PodSpec{}, "serviceaccounts/default"},
	} {
		if got := visitAll(&corev1.Pod{Spec: tt.spec}); !slices.Equal(got, []string{"configmaps/kube-root-ca.crt", tt.want}) {
			t.Errorf("%s: Visit = %q, want [kube-root-ca.crt %q]", tt.name, got, tt.want)
		}
		no := false
		tt.spec.AutomountServiceAccountToken = &no
		if got := visitAll(&corev1.Pod{Spec: tt.spec}); !slices.Equal(got, []string{tt.want}) {
			t.Errorf("%s, no automounted token: Visit = %q, want [%q]", tt.name, got, tt.want)
		}
	}
}

// TestVisitStops: Visit stops at the first false, wherever it is.
func TestVisitStops(t *testing.T) {
	all := visitAll(everything())
	for stop := range all {
		var got []string
		Visit(everything(), func(resource, name string) bool {
			got = append(got, resource+"/"+name)
			return len(got) <= stop
		})
		if want := all[:stop+1]; !slices.Equal(got, want) {
			t.Fatalf("stopping at %d: Visit went on to %q, want %q", stop, got, want)
		}
	}
}
