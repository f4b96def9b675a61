package core

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func row(t *testing.T, plural string, obj runtime.Object) string {
	t.Helper()
	r := rulesFor(plural)
	cells := r.Row(obj)
	if len(cells) != len(r.Columns()) {
		t.Errorf("%s: Row has %d cells for %d columns", plural, len(cells), len(r.Columns()))
	}
	return fmt.Sprintf("%v", cells)
}

func TestPodRow(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago(time.Hour)}}
	waiting := func(reason string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
	}
	terminated := func(reason string, code int32) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}
	}
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	pod := func(mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", CreationTimestamp: ago(10 * time.Minute)},
			Spec: corev1.PodSpec{
				NodeName:   "edge-1",
				Containers: []corev1.Container{{Name: "app", Image: "app"}},
			},
			Status: corev1.PodStatus{
				Phase:             corev1.PodRunning,
				PodIP:             "10.244.1.7",
				PodIPs:            []corev1.PodIP{{IP: "10.244.1.7"}},
				Conditions:        ready,
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, State: running}},
			},
		}
		mutate(p)
		return p
	}
	sidecar := corev1.Container{Name: "proxy", Image: "envoy", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways)}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"running", pod(func(*corev1.Pod) {}),
			"[web 1/1 Running 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"pending, image pull", pod(func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, NominatedNodeName: "edge-2",
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: waiting("ImagePullBackOff")}}}
		}), "[web 0/1 ImagePullBackOff 0 10m <none> <none> edge-2 <none>]"},
		{"pending, not yet scheduled", pod(func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			p.Status = corev1.PodStatus{Phase: corev1.PodPending}
		}), "[web 0/1 Pending 0 10m <none> <none> <none> <none>]"},
		{"scheduling gated", pod(func(p *corev1.Pod) {
			p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}}
		}), "[web 0/1 SchedulingGated 0 10m <none> edge-1 <none> <none>]"},
		{"init containers running", pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "migrate"}, {Name: "seed"}}
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = nil
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{
				{Name: "migrate", State: terminated("Completed", 0)},
				{Name: "seed", State: running},
			}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: waiting("PodInitializing")}}
		}), "[web 0/1 Init:1/2 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"init container crashing", pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "migrate"}}
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = nil
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "migrate", RestartCount: 4,
				State:                waiting("CrashLoopBackOff"),
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: ago(90 * time.Second)}}}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: waiting("PodInitializing")}}
		}), "[web 0/1 Init:CrashLoopBackOff 4 (90s ago) 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"init container failed", pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "migrate"}}
			p.Status.Phase = corev1.PodFailed
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "migrate", State: terminated("", 2)}}
		}), "[web 0/1 Init:ExitCode:2 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"completed", pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodSucceeded
			p.Status.Conditions = nil
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: terminated("Completed", 0)}}
		}), "[web 0/1 Completed 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"error", pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: terminated("Error", 1)}}
		}), "[web 0/1 Error 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"killed by signal", pod(func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Signal: 9, ExitCode: 137}}}}
		}), "[web 0/1 Signal:9 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"one container completed, one running", pod(func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "job"})
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses,
				corev1.ContainerStatus{Name: "job", State: terminated("Completed", 0)})
		}), "[web 1/2 Running 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"one container completed, one running, not ready", pod(func(p *corev1.Pod) {
			p.Status.Conditions = nil
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "job"})
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses,
				corev1.ContainerStatus{Name: "job", State: terminated("Completed", 0)})
		}), "[web 1/2 NotReady 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"restarts", pod(func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = 3
			p.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 1, FinishedAt: ago(5 * time.Minute)}}
		}), "[web 1/1 Running 3 (5m ago) 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"restarts without a time", pod(func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 2 }),
			"[web 1/1 Running 2 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"terminating", pod(func(p *corev1.Pod) { p.DeletionTimestamp = ptrTo(ago(time.Second)) }),
			"[web 1/1 Terminating 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"succeeded, being deleted", pod(func(p *corev1.Pod) {
			p.DeletionTimestamp = ptrTo(ago(time.Second))
			p.Status.Phase = corev1.PodSucceeded
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: terminated("Completed", 0)}}
		}), "[web 0/1 Completed 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"node lost", pod(func(p *corev1.Pod) {
			p.DeletionTimestamp = ptrTo(ago(time.Second))
			p.Status.Reason = "NodeLost"
		}), "[web 1/1 Unknown 0 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"evicted", pod(func(p *corev1.Pod) {
			p.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}
		}), "[web 0/1 Evicted 0 10m <none> edge-1 <none> <none>]"},
		{"sidecar", pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{sidecar}
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue})
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", Ready: true, Started: ptrTo(true), State: running,
				RestartCount: 1, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: ago(3 * time.Hour)}}}}
		}), "[web 2/2 Running 1 (3h ago) 10m 10.244.1.7 edge-1 <none> <none>]"},
		{"readiness gates", pod(func(p *corev1.Pod) {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "lb/ready"}, {ConditionType: "dns/ready"}}
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "lb/ready", Status: corev1.ConditionTrue})
		}), "[web 1/1 Running 0 10m 10.244.1.7 edge-1 <none> 1/2]"},
		{"no creation time", pod(func(p *corev1.Pod) { p.CreationTimestamp = metav1.Time{} }),
			"[web 1/1 Running 0 <unknown> 10.244.1.7 edge-1 <none> <none>]"},
	} {
		if got := row(t, "pods", tc.pod); got != tc.want {
			t.Errorf("Row(%s) = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestServiceRow(t *testing.T) {
	created := ago(3 * 24 * time.Hour)
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want string
	}{
		{"ClusterIP", &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "dns", CreationTimestamp: created},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				Selector: map[string]string{"k8s-app": "dns"},
				Ports:    []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}, {Port: 53, Protocol: corev1.ProtocolTCP}}},
		}, "[dns ClusterIP 10.96.0.10 <none> 53/UDP,53/TCP 3d k8s-app=dns]"},
		{"headless", &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "db", CreationTimestamp: created},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "None", ClusterIPs: []string{"None"}},
		}, "[db ClusterIP None <none> <none> 3d <none>]"},
		{"NodePort with external IP", &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", CreationTimestamp: created},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIPs: []string{"10.96.0.20"}, ExternalIPs: []string{"192.168.1.50"},
				Selector: map[string]string{"app": "web", "tier": "front"},
				Ports:    []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}},
		}, "[web NodePort 10.96.0.20 192.168.1.50 80:30080/TCP 3d app=web,tier=front]"},
		{"LoadBalancer pending", &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "lb", CreationTimestamp: created},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: []string{"10.96.0.30"},
				Ports: []corev1.ServicePort{{Port: 443, NodePort: 31443, Protocol: corev1.ProtocolTCP}}},
		}, "[lb LoadBalancer 10.96.0.30 <pending> 443:31443/TCP 3d <none>]"},
		{"LoadBalancer", &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "lb", CreationTimestamp: created},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: []string{"10.96.0.30"}, ExternalIPs: []string{"9.9.9.9"}},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "203.0.113.9"}, {Hostname: "lb.example.com"}}}},
		}, "[lb LoadBalancer 10.96.0.30 203.0.113.9,lb.example.com,9.9.9.9 <none> 3d <none>]"},
		{"ExternalName", &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "ext", CreationTimestamp: created},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
		}, "[ext ExternalName <none> db.example.com <none> 3d <none>]"},
	} {
		if got := row(t, "services", tc.svc); got != tc.want {
			t.Errorf("Row(%s) = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestOtherRows(t *testing.T) {
	created := ago(26 * time.Hour)
	om := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "default", CreationTimestamp: created}
	}
	for _, tc := range []struct {
		plural string
		obj    runtime.Object
		want   string
	}{
		{"namespaces", &corev1.Namespace{ObjectMeta: om("team-a"), Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
			"[team-a Terminating 26h]"},
		{"nodes", &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "edge-1", CreationTimestamp: created, Labels: map[string]string{
				"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/edge": "", "kubernetes.io/role": "gateway"}},
			Spec: corev1.NodeSpec{Unschedulable: true},
			Status: corev1.NodeStatus{
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
				Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "edge-1"}, {Type: corev1.NodeInternalIP, Address: "192.168.1.10"}},
				NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.33.0-outpost", OSImage: "Debian GNU/Linux 12", ContainerRuntimeVersion: "containerd://2.0.0"},
			},
		}, "[edge-1 Ready,SchedulingDisabled control-plane,edge,gateway 26h v1.33.0-outpost 192.168.1.10 <none> Debian GNU/Linux 12 <unknown> containerd://2.0.0]"},
		{"nodes", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "new"}},
			"[new Unknown <none> <unknown>  <none> <none> <unknown> <unknown> <unknown>]"},
		{"nodes", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "down", CreationTimestamp: created},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}},
			"[down NotReady <none> 26h  <none> <none> <unknown> <unknown> <unknown>]"},
		{"configmaps", &corev1.ConfigMap{ObjectMeta: om("cfg"), Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": nil}},
			"[cfg 2 26h]"},
		{"secrets", &corev1.Secret{ObjectMeta: om("tls"), Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": nil, "tls.key": nil}},
			"[tls kubernetes.io/tls 2 26h]"},
		{"serviceaccounts", &corev1.ServiceAccount{ObjectMeta: om("default")}, "[default 0 26h]"},
		{"endpoints", &corev1.Endpoints{ObjectMeta: om("web"), Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1"}, {IP: "10.0.0.2"}, {IP: "fd00::3"}},
			Ports:     []corev1.EndpointPort{{Name: "http", Port: 80}, {Name: "https", Port: 443}},
		}}}, "[web 10.0.0.1:80,10.0.0.2:80,[fd00::3]:80 + 3 more... 26h]"},
		{"endpoints", &corev1.Endpoints{ObjectMeta: om("none")}, "[none <none> 26h]"},
		{"limitranges", &corev1.LimitRange{ObjectMeta: om("limits")}, "[limits 2025-05-31T10:00:00Z]"},
		{"resourcequotas", &corev1.ResourceQuota{ObjectMeta: om("quota"), Status: corev1.ResourceQuotaStatus{
			Hard: corev1.ResourceList{"pods": resource.MustParse("10"), "requests.cpu": resource.MustParse("4"), "limits.memory": resource.MustParse("8Gi")},
			Used: corev1.ResourceList{"pods": resource.MustParse("3"), "requests.cpu": resource.MustParse("1500m")},
		}}, "[quota pods: 3/10, requests.cpu: 1500m/4 limits.memory: 0/8Gi 26h]"},
		{"events", &corev1.Event{
			ObjectMeta:     om("web.17a"),
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "web", FieldPath: "spec.containers{app}"},
			Reason:         "BackOff", Message: "Back-off restarting failed container\n", Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "kubelet", Host: "edge-1"},
			FirstTimestamp: ago(time.Hour), LastTimestamp: ago(30 * time.Second), Count: 7,
		}, "[30s Warning BackOff pod/web spec.containers{app} kubelet, edge-1 Back-off restarting failed container 60m 7 web.17a]"},
		{"events", &corev1.Event{
			ObjectMeta:     om("node.17b"),
			InvolvedObject: corev1.ObjectReference{Kind: "Node"},
			Reason:         "Rebooted", Type: corev1.EventTypeNormal,
			EventTime:           metav1.NewMicroTime(t0.Add(-2 * time.Minute)),
			ReportingController: "outpost.dev/edge", ReportingInstance: "edge-2",
		}, "[2m Normal Rebooted node  outpost.dev/edge, edge-2  2m 1 node.17b]"},
	} {
		if got := row(t, tc.plural, tc.obj); got != tc.want {
			t.Errorf("%s: Row = %s, want %s", tc.plural, got, tc.want)
		}
	}
}
