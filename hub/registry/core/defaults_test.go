package core

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func toYAML(t *testing.T, v interface{}) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return string(b)
}

// TestDefaults compares what a minimal object becomes after Default and
// PrepareForCreate with what `kubectl get -o yaml` shows for it upstream
// (minus what admission plugins add, such as the service account token
// volume and the not-ready tolerations).
func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		obj   func() interface{}
		wantY string
	}{{
		name: "pod spec",
		obj: func() interface{} {
			return create("pods", &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
			}).Spec
		},
		wantY: `
containers:
- image: nginx
  imagePullPolicy: Always
  name: nginx
  resources: {}
  terminationMessagePath: /dev/termination-log
  terminationMessagePolicy: File
dnsPolicy: ClusterFirst
enableServiceLinks: true
preemptionPolicy: PreemptLowerPriority
priority: 0
restartPolicy: Always
schedulerName: default-scheduler
securityContext: {}
terminationGracePeriodSeconds: 30
`,
	}, {
		name: "pod status",
		obj: func() interface{} {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
			}
			return create("pods", p).Status
		},
		wantY: `
phase: Pending
qosClass: BestEffort
`,
	}, {
		name: "pod details",
		obj: func() interface{} {
			return create("pods", &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
				Spec: corev1.PodSpec{
					DeprecatedServiceAccount: "builder",
					Containers: []corev1.Container{{
						Name:  "app",
						Image: "registry.local:5000/team/app:v2",
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						Env: []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
						LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/app"}, {Name: "tmp", MountPath: "/tmp"}},
					}},
					Volumes: []corev1.Volume{
						{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}},
						{Name: "tmp"},
						{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}},
						{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls"}}},
					},
				},
			}).Spec
		},
		wantY: `
containers:
- env:
  - name: NODE
    valueFrom:
      fieldRef:
        apiVersion: v1
        fieldPath: spec.nodeName
  image: registry.local:5000/team/app:v2
  imagePullPolicy: IfNotPresent
  livenessProbe:
    failureThreshold: 3
    httpGet:
      path: /
      port: 8080
      scheme: HTTP
    periodSeconds: 10
    successThreshold: 1
    timeoutSeconds: 1
  name: app
  ports:
  - containerPort: 8080
    protocol: TCP
  resources:
    limits:
      cpu: 500m
      memory: 128Mi
    requests:
      cpu: 500m
      memory: 128Mi
  terminationMessagePath: /dev/termination-log
  terminationMessagePolicy: File
  volumeMounts:
  - mountPath: /etc/app
    name: cfg
  - mountPath: /tmp
    name: tmp
dnsPolicy: ClusterFirst
enableServiceLinks: true
preemptionPolicy: PreemptLowerPriority
priority: 0
restartPolicy: Always
schedulerName: default-scheduler
securityContext: {}
serviceAccount: builder
serviceAccountName: builder
terminationGracePeriodSeconds: 30
volumes:
- configMap:
    defaultMode: 420
    name: app
  name: cfg
- emptyDir: {}
  name: tmp
- hostPath:
    path: /var/log
    type: ""
  name: host
- name: tls
  secret:
    defaultMode: 420
    secretName: tls
`,
	}, {
		name: "service",
		obj: func() interface{} {
			svc := validService()
			return svc.Spec
		},
		wantY: `
internalTrafficPolicy: Cluster
ipFamilies:
- IPv4
ipFamilyPolicy: SingleStack
ports:
- port: 80
  protocol: TCP
  targetPort: 80
selector:
  app: web
sessionAffinity: None
type: ClusterIP
`,
	}, {
		name: "service NodePort with ClientIP affinity",
		obj: func() interface{} {
			return create("services", &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
				Spec: corev1.ServiceSpec{
					Type:            corev1.ServiceTypeNodePort,
					SessionAffinity: corev1.ServiceAffinityClientIP,
					ClusterIP:       "fd00::10",
					Ports:           []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
				},
			}).Spec
		},
		wantY: `
clusterIP: fd00::10
clusterIPs:
- fd00::10
externalTrafficPolicy: Cluster
internalTrafficPolicy: Cluster
ipFamilies:
- IPv6
ipFamilyPolicy: SingleStack
ports:
- name: http
  port: 80
  protocol: TCP
  targetPort: http
sessionAffinity: ClientIP
sessionAffinityConfig:
  clientIP:
    timeoutSeconds: 10800
type: NodePort
`,
	}, {
		name: "secret",
		obj: func() interface{} {
			s := create("secrets", &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
				StringData: map[string]string{"password": "hunter2"},
			})
			return struct {
				Data       map[string][]byte `json:"data"`
				StringData map[string]string `json:"stringData,omitempty"`
				Type       corev1.SecretType `json:"type"`
			}{s.Data, s.StringData, s.Type}
		},
		wantY: `
data:
  password: aHVudGVyMg==
type: Opaque
`,
	}, {
		name: "namespace",
		obj: func() interface{} {
			return create("namespaces", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}})
		},
		wantY: `
metadata:
  labels:
    kubernetes.io/metadata.name: demo
  name: demo
spec:
  finalizers:
  - kubernetes
status:
  phase: Active
`,
	}, {
		name: "endpoints",
		obj: func() interface{} {
			return create("endpoints", &corev1.Endpoints{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
				Subsets: []corev1.EndpointSubset{{
					Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1"}},
					Ports:     []corev1.EndpointPort{{Port: 80}},
				}},
			}).Subsets
		},
		wantY: `
- addresses:
  - ip: 10.0.0.1
  ports:
  - port: 80
    protocol: TCP
`,
	}, {
		name: "limitrange",
		obj: func() interface{} {
			return create("limitranges", &corev1.LimitRange{
				ObjectMeta: metav1.ObjectMeta{Name: "limits", Namespace: "default"},
				Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
					Type: corev1.LimitTypeContainer,
					Max:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
					Min:  corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				}}},
			}).Spec
		},
		wantY: `
limits:
- default:
    cpu: "1"
  defaultRequest:
    cpu: "1"
    memory: 64Mi
  max:
    cpu: "1"
  min:
    memory: 64Mi
  type: Container
`,
	}} {
		got := toYAML(t, tc.obj())
		if w := strings.TrimPrefix(tc.wantY, "\n"); got != w {
			t.Errorf("%s: defaulted =\n%s\nwant\n%s", tc.name, got, w)
		}
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for _, tc := range []struct {
		image string
		want  corev1.PullPolicy
	}{
		{"nginx", corev1.PullAlways},
		{"nginx:latest", corev1.PullAlways},
		{"library/nginx", corev1.PullAlways},
		{"localhost:5000/app", corev1.PullAlways},
		{"localhost:5000/app:latest", corev1.PullAlways},
		{"nginx:1.27", corev1.PullIfNotPresent},
		{"ghcr.io/org/app:v1.2.3", corev1.PullIfNotPresent},
		{"nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", corev1.PullIfNotPresent},
		{"nginx:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", corev1.PullAlways},
		{"Nginx", corev1.PullIfNotPresent}, // does not parse
		{"", corev1.PullIfNotPresent},
	} {
		if got := defaultPullPolicy(tc.image); got != tc.want {
			t.Errorf("defaultPullPolicy(%q) = %v, want %v", tc.image, got, tc.want)
		}
	}
}

func TestPodQOS(t *testing.T) {
	rl := func(cpu, mem string) corev1.ResourceList {
		l := corev1.ResourceList{}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		return l
	}
	ctr := func(req, lim corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: "c", Image: "i", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	for _, tc := range []struct {
		name       string
		containers []corev1.Container
		want       corev1.PodQOSClass
	}{
		{"nothing", []corev1.Container{ctr(nil, nil)}, corev1.PodQOSBestEffort},
		{"limits only", []corev1.Container{ctr(nil, rl("1", "1Gi"))}, corev1.PodQOSGuaranteed},
		{"equal", []corev1.Container{ctr(rl("1", "1Gi"), rl("1", "1Gi"))}, corev1.PodQOSGuaranteed},
		{"request below limit", []corev1.Container{ctr(rl("500m", "1Gi"), rl("1", "1Gi"))}, corev1.PodQOSBurstable},
		{"cpu limit only", []corev1.Container{ctr(nil, rl("1", ""))}, corev1.PodQOSBurstable},
		{"one of two containers", []corev1.Container{ctr(rl("1", "1Gi"), rl("1", "1Gi")), ctr(nil, nil)}, corev1.PodQOSBurstable},
		{"requests only", []corev1.Container{ctr(rl("100m", ""), nil)}, corev1.PodQOSBurstable},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{Containers: tc.containers}}
		pod = create("pods", pod) // requests default to limits first
		if got := pod.Status.QOSClass; got != tc.want {
			t.Errorf("%s: qosClass = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDefaultPodTemplate(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		HostNetwork: true,
		Containers: []corev1.Container{{Name: "c", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: 53}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
	}}
	DefaultPodTemplate(tmpl)
	s := tmpl.Spec
	c := s.Containers[0]
	switch {
	case s.RestartPolicy != corev1.RestartPolicyAlways || s.DNSPolicy != corev1.DNSClusterFirst || s.SchedulerName != corev1.DefaultSchedulerName:
		t.Errorf("DefaultPodTemplate: spec = %+v, want pod spec defaults", s)
	case c.ImagePullPolicy != corev1.PullAlways || c.Ports[0].Protocol != corev1.ProtocolTCP:
		t.Errorf("DefaultPodTemplate: container = %+v, want container defaults", c)
	case s.EnableServiceLinks != nil || s.Priority != nil || c.Resources.Requests != nil || c.Ports[0].HostPort != 0:
		t.Errorf("DefaultPodTemplate: spec = %+v, want no pod-only defaults", s)
	}
	if errs := ValidatePodTemplate(tmpl, specPath.Child("template")); len(errs) != 0 {
		t.Errorf("ValidatePodTemplate(defaulted) = %v, want none", errs)
	}
	tmpl.Spec.Containers[0].Image = ""
	tmpl.Labels = map[string]string{"bad key": "x"}
	got := summary(ValidatePodTemplate(tmpl, specPath.Child("template")))
	if w := want("spec.template.labels: Invalid value", "spec.template.spec.containers[0].image: Required value"); !sameLines(got, w) {
		t.Errorf("ValidatePodTemplate(bad) = %v, want %v", got, w)
	}
}
