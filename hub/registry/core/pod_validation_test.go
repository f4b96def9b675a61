package core

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

func TestValidatePod(t *testing.T) {
	rules := rulesFor("pods")
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Pod)
		want   []string
	}{
		{"valid", func(*corev1.Pod) {}, nil},
		{"bad name", func(p *corev1.Pod) { p.Name = "Web_1" }, want("metadata.name: Invalid value")},
		{"no namespace", func(p *corev1.Pod) { p.Namespace = "" }, want("metadata.namespace: Required value")},
		{"bad label", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "-x-"} }, want("metadata.labels: Invalid value")},
		{"bad finalizer", func(p *corev1.Pod) { p.Finalizers = []string{"cleanup"} }, want("metadata.finalizers[0]: Invalid value")},
		{"no containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, want("spec.containers: Required value")},
		{"no image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, want("spec.containers[0].image: Required value")},
		{"image with spaces", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nginx " },
			want("spec.containers[0].image: Invalid value")},
		{"bad container name", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "Nginx_1" },
			want("spec.containers[0].name: Invalid value")},
		{"duplicate container", func(p *corev1.Pod) {
			c := p.Spec.Containers[0]
			c.Ports = nil
			p.Spec.Containers = append(p.Spec.Containers, c)
		}, want("spec.containers[1].name: Duplicate value")},
		{"init container named like a container", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "nginx", Image: "busybox", ImagePullPolicy: corev1.PullAlways,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile}}
		}, want("spec.initContainers[0].name: Duplicate value")},
		{"init container with a probe", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", ImagePullPolicy: corev1.PullAlways,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ReadinessProbe:           &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}}
		}, want("spec.initContainers[0].readinessProbe: Forbidden")},
		{"bad ports", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{
				{Name: "http", ContainerPort: 80, Protocol: corev1.ProtocolTCP},
				{Name: "http", ContainerPort: 70000, Protocol: "HTTP"},
				{Name: "metrics_port", Protocol: corev1.ProtocolTCP},
			}
		}, want(
			"spec.containers[0].ports[1].name: Duplicate value",
			"spec.containers[0].ports[1].containerPort: Invalid value",
			"spec.containers[0].ports[1].protocol: Unsupported value",
			"spec.containers[0].ports[2].name: Invalid value",
			"spec.containers[0].ports[2].containerPort: Required value",
		)},
		{"host port clash", func(p *corev1.Pod) {
			c := p.Spec.Containers[0]
			c.Name = "sidecar"
			p.Spec.Containers[0].Ports[0].HostPort = 8080
			c.Ports = []corev1.ContainerPort{{ContainerPort: 81, HostPort: 8080, Protocol: corev1.ProtocolTCP}}
			p.Spec.Containers = append(p.Spec.Containers, c)
		}, want("spec.containers[1].ports[0].hostPort: Duplicate value")},
		{"hostNetwork port mismatch", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.Containers[0].Ports[0].HostPort = 8080
		}, want("spec.containers[0].ports[0].hostPort: Invalid value")},
		{"bad enums", func(p *corev1.Pod) {
			p.Spec.RestartPolicy = "Sometimes"
			p.Spec.DNSPolicy = "Google"
			p.Spec.Containers[0].ImagePullPolicy = "Daily"
			p.Spec.Containers[0].TerminationMessagePolicy = "Stdout"
		}, want(
			"spec.restartPolicy: Unsupported value",
			"spec.dnsPolicy: Unsupported value",
			"spec.containers[0].imagePullPolicy: Unsupported value",
			"spec.containers[0].terminationMessagePolicy: Unsupported value",
		)},
		{"env", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{
				{Name: "A=B"},
				{Name: ""},
				{Name: "FROM", Value: "x", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}},
				{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.phase"}}},
				{Name: "LABEL", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels['app']"}}},
			}
		}, want(
			"spec.containers[0].env[0].name: Invalid value",
			"spec.containers[0].env[1].name: Required value",
			"spec.containers[0].env[2].valueFrom: Invalid value",
			"spec.containers[0].env[3].valueFrom.fieldRef.fieldPath: Unsupported value",
		)},
		{"envFrom without source", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{Prefix: "X_"}}
		}, want("spec.containers[0].envFrom: Invalid value")},
		{"volumes", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "two", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{},
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
				{Name: "none"},
				{Name: "Bad_Name", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "nosecret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{DefaultMode: ptrTo(int32(01000))}}},
				{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/a/../b"}}},
			}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
				{Name: "data", MountPath: "/data"},
				{Name: "missing", MountPath: "/data"},
				{Name: "data", SubPath: "../x"},
			}
		}, want(
			"spec.volumes[1].name: Duplicate value",
			"spec.volumes[2].configMap: Forbidden",
			"spec.volumes[3]: Required value",
			"spec.volumes[4].name: Invalid value",
			"spec.volumes[5].secret.secretName: Required value",
			"spec.volumes[5].secret.defaultMode: Invalid value",
			"spec.volumes[6].hostPath.path: Invalid value",
			"spec.containers[0].volumeMounts[1].name: Not found",
			"spec.containers[0].volumeMounts[1].mountPath: Invalid value",
			"spec.containers[0].volumeMounts[2].mountPath: Required value",
			"spec.containers[0].volumeMounts.subPath: Invalid value",
		)},
		{"resources", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
				Limits: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("500m"),
					corev1.ResourceMemory: resource.MustParse("-1Gi"),
					"gpu":                 resource.MustParse("1"),
					"example.com/dongle":  resource.MustParse("1"),
				},
				Requests: corev1.ResourceList{
					corev1.ResourceCPU:   resource.MustParse("1"),
					"example.com/dongle": resource.MustParse("500m"),
				},
			}
		}, want(
			"spec.containers[0].resources.limits[memory]: Invalid value",
			"spec.containers[0].resources.limits[gpu]: Invalid value",
			"spec.containers[0].resources.limits[gpu]: Invalid value",
			"spec.containers[0].resources.requests: Invalid value",
			"spec.containers[0].resources.requests: Invalid value",
			"spec.containers[0].resources.requests[example.com/dongle]: Invalid value",
		)},
		{"probes", func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.LivenessProbe = &corev1.Probe{SuccessThreshold: 2, PeriodSeconds: -1}
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				Exec:      &corev1.ExecAction{},
				TCPSocket: &corev1.TCPSocketAction{},
			}, SuccessThreshold: 1}
		}, want(
			"spec.containers[0].livenessProbe: Required value",
			"spec.containers[0].livenessProbe.periodSeconds: Invalid value",
			"spec.containers[0].livenessProbe.successThreshold: Invalid value",
			"spec.containers[0].readinessProbe.exec.command: Required value",
			"spec.containers[0].readinessProbe.tcpSocket: Forbidden",
		)},
		{"tolerations", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{
				{Key: "k", Operator: "Maybe"},
				{Operator: corev1.TolerationOpEqual, Value: "v"},
				{Key: "k", Operator: corev1.TolerationOpExists, Effect: "NoSchedule", TolerationSeconds: ptrTo(int64(5))},
			}
		}, want(
			"spec.tolerations[0].operator: Unsupported value",
			"spec.tolerations[1].operator: Invalid value",
			"spec.tolerations[2].effect: Invalid value",
		)},
		{"misc spec", func(p *corev1.Pod) {
			p.Spec.ActiveDeadlineSeconds = ptrTo(int64(0))
			p.Spec.NodeName = "Node_1"
			p.Spec.ServiceAccountName = "Bad SA"
			p.Spec.Hostname = "host.name"
			p.Spec.NodeSelector = map[string]string{"disk": "s s d"}
			p.Spec.TerminationGracePeriodSeconds = nil
			p.Spec.DNSPolicy = corev1.DNSNone
		}, want(
			"spec.activeDeadlineSeconds: Invalid value",
			"spec.nodeName: Invalid value",
			"spec.serviceAccountName: Invalid value",
			"spec.hostname: Invalid value",
			"spec.nodeSelector: Invalid value",
			"spec.terminationGracePeriodSeconds: Required value",
			"spec.dnsConfig: Required value",
		)},
		{"ephemeral containers on create", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox", ImagePullPolicy: corev1.PullAlways, TerminationMessagePolicy: corev1.TerminationMessageReadFile}}}
		}, want("spec.ephemeralContainers: Forbidden")},
		{"projected token without service account", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
		}, want("spec.volumes[0].projected.sources[0].serviceAccountToken: Forbidden")},
		{"sidecar", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "envoy", ImagePullPolicy: corev1.PullAlways,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile, RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
					TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}}}
		}, nil},
	} {
		pod := validPod()
		tc.mutate(pod)
		got := summary(rules.Validate(pod))
		if !sameLines(got, tc.want) {
			t.Errorf("Validate(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestValidatePodUpdate(t *testing.T) {
	rules := rulesFor("pods")
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Pod)
		want   []string
	}{
		{"nothing", func(*corev1.Pod) {}, nil},
		{"image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nginx:1.28" }, nil},
		{"labels", func(p *corev1.Pod) { p.Labels = map[string]string{"tier": "web"} }, nil},
		{"activeDeadlineSeconds set", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptrTo(int64(60)) }, nil},
		{"toleration added", func(p *corev1.Pod) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists})
		}, nil},
		{"image removed", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, want("spec.containers[0].image: Required value")},
		{"container added", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "b", Image: "b",
				ImagePullPolicy: corev1.PullAlways, TerminationMessagePolicy: corev1.TerminationMessageReadFile})
		}, want("spec.containers: Forbidden")},
		{"env changed", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "b"}}
		}, want("spec: Forbidden")},
		{"restartPolicy changed", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }, want("spec: Forbidden")},
		{"name changed", func(p *corev1.Pod) { p.Name = "other" }, want("metadata.name: Invalid value")},
		{"mirror annotation added", func(p *corev1.Pod) {
			p.Spec.NodeName = "n1"
			p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
		}, want("metadata.annotations[kubernetes.io/config.mirror]: Forbidden", "spec: Forbidden")},
	} {
		old := validPod()
		old.ResourceVersion = "1"
		pod := old.DeepCopy()
		tc.mutate(pod)
		rules.Default(pod)
		rules.PrepareForUpdate(pod, old)
		errs := append(rules.Validate(pod), rules.ValidateUpdate(pod, old)...)
		got := summary(dedupe(errs))
		if !sameLines(got, tc.want) {
			t.Errorf("ValidateUpdate(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}

	// The message lists what may change, as upstream's does.
	old := validPod()
	old.ResourceVersion = "1"
	pod := old.DeepCopy()
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "b"}}
	errs := rules.ValidateUpdate(pod, old)
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,") {
		t.Errorf("ValidateUpdate(env changed) = %v, want the upstream message", errs)
	}
	if !strings.Contains(errs[0].Detail, `Name: "A"`) {
		t.Errorf("ValidateUpdate(env changed) detail = %q, want a diff naming the new variable", errs[0].Detail)
	}

	// Status is the status subresource's to change.
	pod = old.DeepCopy()
	pod.Status.Phase = corev1.PodRunning
	rules.PrepareForUpdate(pod, old)
	if pod.Status.Phase != corev1.PodPending {
		t.Errorf("PrepareForUpdate kept status.phase %q, want the stored Pending", pod.Status.Phase)
	}
}

// dedupe drops errors that Validate and ValidateUpdate both report.
func dedupe(errs field.ErrorList) field.ErrorList {
	seen := map[string]bool{}
	var out field.ErrorList
	for _, e := range errs {
		if k := e.Error(); !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	return out
}

func TestValidatePodStatusUpdate(t *testing.T) {
	sv, ok := rulesFor("pods").(apiserver.StatusValidator)
	if !ok {
		t.Fatal("pod rules do not validate status updates")
	}
	running := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	}
	for _, tc := range []struct {
		name   string
		old    func(*corev1.Pod)
		status func(*corev1.PodStatus)
		want   []string
	}{
		{"running", nil, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodRunning
			s.ContainerStatuses = []corev1.ContainerStatus{running("nginx")}
			s.PodIP, s.PodIPs = "10.0.0.1", []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}
			s.HostIP, s.HostIPs = "192.168.1.10", []corev1.HostIP{{IP: "192.168.1.10"}}
			s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}, nil},
		{"unknown phase", nil, func(s *corev1.PodStatus) { s.Phase = "Started" }, want("status.phase: Unsupported value")},
		{"stranger container", nil, func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{running("nginx"), running("nginx"), running("ghost")}
		}, want("status.containerStatuses[1].name: Duplicate value", "status.containerStatuses[2].name: Not found")},
		{"bad IPs", nil, func(s *corev1.PodStatus) {
			s.PodIPs = []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "10.0.0.2"}}
			s.HostIP, s.HostIPs = "192.168.1.10", []corev1.HostIP{{IP: "192.168.1.11"}}
		}, want("status.podIPs: Invalid value", "status.hostIPs[0].ip: Invalid value")},
		{"qos class", nil, func(s *corev1.PodStatus) { s.QOSClass = corev1.PodQOSGuaranteed }, want("status.qosClass: Invalid value")},
		{"bad condition type", nil, func(s *corev1.PodStatus) {
			s.Conditions = []corev1.PodCondition{{Type: "my condition", Status: corev1.ConditionTrue}}
		}, want("status.conditions[0].type: Invalid value")},
		{"restart of a finished container", func(p *corev1.Pod) {
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "nginx",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
		}, func(s *corev1.PodStatus) {
			s.ContainerStatuses = []corev1.ContainerStatus{running("nginx")}
		}, want("status.containerStatuses[0].state: Forbidden")},
	} {
		old := validPod()
		old.ResourceVersion = "1"
		if tc.old != nil {
			tc.old(old)
		}
		pod := old.DeepCopy()
		tc.status(&pod.Status)
		got := summary(sv.ValidateStatusUpdate(pod, old))
		if !sameLines(got, tc.want) {
			t.Errorf("ValidateStatusUpdate(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestGracePeriod(t *testing.T) {
	gd, ok := rulesFor("pods").(apiserver.GracefulDeleter)
	if !ok {
		t.Fatal("pod rules do not decide grace periods")
	}
	for _, tc := range []struct {
		name      string
		nodeName  string
		phase     corev1.PodPhase
		podPeriod *int64
		requested *int64
		want      int64
	}{
		{"bound, pod default", "n1", corev1.PodRunning, ptrTo(int64(30)), nil, 30},
		{"bound, pod's own", "n1", corev1.PodRunning, ptrTo(int64(120)), nil, 120},
		{"bound, unset", "n1", corev1.PodRunning, nil, nil, 30},
		{"bound, requested", "n1", corev1.PodRunning, ptrTo(int64(30)), ptrTo(int64(5)), 5},
		{"bound, requested now", "n1", corev1.PodRunning, ptrTo(int64(30)), ptrTo(int64(0)), 0},
		{"bound, negative", "n1", corev1.PodRunning, ptrTo(int64(30)), ptrTo(int64(-3)), 1},
		{"unbound", "", corev1.PodPending, ptrTo(int64(30)), ptrTo(int64(10)), 0},
		{"succeeded", "n1", corev1.PodSucceeded, ptrTo(int64(30)), nil, 0},
		{"failed", "n1", corev1.PodFailed, ptrTo(int64(30)), ptrTo(int64(10)), 0},
	} {
		pod := &corev1.Pod{
			Spec:   corev1.PodSpec{NodeName: tc.nodeName, TerminationGracePeriodSeconds: tc.podPeriod},
			Status: corev1.PodStatus{Phase: tc.phase},
		}
		if got := gd.GracePeriod(pod, tc.requested); got != tc.want {
			t.Errorf("GracePeriod(%s) = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := gd.GracePeriod(&corev1.Service{}, nil); got != 0 {
		t.Errorf("GracePeriod(service) = %d, want 0", got)
	}
}
