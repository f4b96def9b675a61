package hubd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/hub/quota"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// quotaList parses "name=quantity" pairs into a ResourceList.
func quotaList(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range pairs {
		n, q, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(n)] = resource.MustParse(q)
	}
	return out
}

// quotaEnv is a namespace of a running hub that a test of quotas works
// in.
type quotaEnv struct {
	t   *testing.T
	ctx context.Context
	cs  kubernetes.Interface
	ns  string
}

// newQuotaEnv makes namespace ns and waits for its CA bundle, so that
// the objects counted in it no longer change by themselves.
func newQuotaEnv(t *testing.T, cs kubernetes.Interface, ns string) *quotaEnv {
	t.Helper()
	e := &quotaEnv{t: t, ctx: context.Background(), cs: cs, ns: ns}
	if _, err := cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "kube-root-ca.crt in "+ns, func() (bool, string) {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(e.ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return e
}

// createQuota creates a quota of hard (and scopes) and waits for the
// controller to count it.
func (e *quotaEnv) createQuota(name string, hard corev1.ResourceList, scopes ...corev1.ResourceQuotaScope) {
	e.t.Helper()
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard, Scopes: scopes}}
	if _, err := e.cs.CoreV1().ResourceQuotas(e.ns).Create(e.ctx, q, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.usedIs(name, "status counted", corev1.ResourceList{})
}

// usedIs waits until quota name's status.hard is its spec.hard and its
// status.used has used (other resources are not looked at), as the
// conformance specs' waitForResourceQuota.
func (e *quotaEnv) usedIs(name, what string, used corev1.ResourceList) {
	e.t.Helper()
	wait.For(e.t, 10*time.Second, name+": "+what, func() (bool, string) {
		q, err := e.cs.CoreV1().ResourceQuotas(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		why := fmt.Sprintf("hard %s used %s", quota.Format(q.Status.Hard), quota.Format(q.Status.Used))
		if !quota.Equal(q.Status.Hard, q.Spec.Hard) || len(q.Status.Used) != len(q.Spec.Hard) {
			return false, why
		}
		for n, v := range used {
			if got, ok := q.Status.Used[n]; !ok || got.Cmp(v) != 0 {
				return false, why
			}
		}
		return true, why
	})
}

// pod returns a pod that no scheduler places, with requests and limits.
func quotaTestPod(name string, requests, limits corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{SchedulerName: "test-nobody", Containers: []corev1.Container{{
			Name: "pause", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
		}}},
	}
}

// TestResourceQuotaConformance does what upstream's ResourceQuota
// conformance specs do, against a real hub with its controllers: a
// quota's status is counted at once; services, secrets, configmaps,
// replication controllers, replica sets and pods are charged when
// created and given back when deleted; what would go over a limit is
// refused with 403 and upstream's message; scopes select pods.
func TestResourceQuotaConformance(t *testing.T) {
	defer goleak.VerifyNone(t)
	h, stop := startHub(t, t.TempDir())
	defer stop()
	cs, _ := clientset(t, adminConfig(t, h))
	e := newQuotaEnv(t, cs, "quota-e2e")
	ctx := e.ctx
	secrets, err := cs.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := cs.CoreV1().ConfigMaps(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nSecrets, nCMs := len(secrets.Items), len(cms.Items)
	hard := quotaList("pods=5", "services=10", "services.nodeports=1", "services.loadbalancers=1", "replicationcontrollers=10",
		"resourcequotas=1", "cpu=1", "memory=500Mi", "ephemeral-storage=50Gi", "persistentvolumeclaims=10", "requests.storage=10Gi",
		"gold.storageclass.storage.k8s.io/persistentvolumeclaims=10", "count/replicasets.apps=5", "requests.example.com/dongle=3")
	hard[corev1.ResourceSecrets] = *resource.NewQuantity(int64(nSecrets+1), resource.DecimalSI)
	hard[corev1.ResourceConfigMaps] = *resource.NewQuantity(int64(nCMs+1), resource.DecimalSI)
	e.createQuota("test-quota", hard)
	e.usedIs("test-quota", "promptly calculated", quotaList("resourcequotas=1", "pods=0", fmt.Sprintf("secrets=%d", nSecrets), fmt.Sprintf("configmaps=%d", nCMs)))

	// A second quota would go over resourcequotas=1.
	_, err = cs.CoreV1().ResourceQuotas(e.ns).Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "second"}, Spec: corev1.ResourceQuotaSpec{Hard: quotaList("pods=1")}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("second quota: %v, want 403", err)
	}

	t.Run("service", func(t *testing.T) {
		svcs := cs.CoreV1().Services(e.ns)
		svc := func(name string, typ corev1.ServiceType) *corev1.Service {
			return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Port: 80}}}}
		}
		for _, s := range []*corev1.Service{svc("test-service", corev1.ServiceTypeClusterIP), svc("test-service-np", corev1.ServiceTypeNodePort)} {
			if _, err := svcs.Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := svcs.Create(ctx, svc("test-service-lb", corev1.ServiceTypeLoadBalancer), metav1.CreateOptions{})
		if want := `services "test-service-lb" is forbidden: exceeded quota: test-quota, requested: services.nodeports=1, used: services.nodeports=1, limited: services.nodeports=1`; !apierrors.IsForbidden(err) || err.Error() != want {
			t.Errorf("load balancer: %v, want 403 %q", err, want)
		}
		e.usedIs("test-quota", "services charged", quotaList("services=2", "services.nodeports=1", "services.loadbalancers=0"))
		for _, n := range []string{"test-service", "test-service-np"} {
			if err := svcs.Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		e.usedIs("test-quota", "services given back", quotaList("services=0", "services.nodeports=0"))
	})

	t.Run("secret and configmap", func(t *testing.T) {
		if _, err := cs.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.usedIs("test-quota", "secret and configmap charged", quotaList(fmt.Sprintf("secrets=%d", nSecrets+1), fmt.Sprintf("configmaps=%d", nCMs+1)))
		_, err := cs.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm2"}}, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: test-quota, requested: configmaps=1") {
			t.Errorf("configmap over quota: %v, want 403 exceeded quota", err)
		}
		if err := cs.CoreV1().Secrets(e.ns).Delete(ctx, "s", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().ConfigMaps(e.ns).Delete(ctx, "cm", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.usedIs("test-quota", "secret and configmap given back", quotaList(fmt.Sprintf("secrets=%d", nSecrets), fmt.Sprintf("configmaps=%d", nCMs)))
	})

	t.Run("replication controller and replica set", func(t *testing.T) {
		labels := map[string]string{"app": "q"}
		tmpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: quotaTestPod("", nil, nil).Spec}
		rc := &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "rc"}, Spec: corev1.ReplicationControllerSpec{Replicas: new(int32(0)), Selector: labels, Template: tmpl}}
		if _, err := cs.CoreV1().ReplicationControllers(e.ns).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs"}, Spec: appsv1.ReplicaSetSpec{Replicas: new(int32(0)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: *tmpl}}
		if _, err := cs.AppsV1().ReplicaSets(e.ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.usedIs("test-quota", "rc and rs charged", quotaList("replicationcontrollers=1", "count/replicasets.apps=1"))
		if err := cs.CoreV1().ReplicationControllers(e.ns).Delete(ctx, "rc", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.AppsV1().ReplicaSets(e.ns).Delete(ctx, "rs", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.usedIs("test-quota", "rc and rs given back", quotaList("replicationcontrollers=0", "count/replicasets.apps=0"))
	})

	t.Run("pod", func(t *testing.T) {
		pods := cs.CoreV1().Pods(e.ns)
		requests := quotaList("cpu=500m", "memory=252Mi", "ephemeral-storage=30Gi", "example.com/dongle=2")
		if _, err := pods.Create(ctx, quotaTestPod("test-pod", requests, quotaList("example.com/dongle=2")), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		used := quotaList("pods=1", "cpu=500m", "memory=252Mi", "ephemeral-storage=30Gi", "requests.example.com/dongle=2")
		e.usedIs("test-quota", "pod charged", used)
		_, err := pods.Create(ctx, quotaTestPod("fail-pod", quotaList("cpu=600m", "memory=100Mi"), nil), metav1.CreateOptions{})
		if want := `pods "fail-pod" is forbidden: exceeded quota: test-quota, requested: cpu=600m, used: cpu=500m, limited: cpu=1`; !apierrors.IsForbidden(err) || err.Error() != want {
			t.Errorf("pod over cpu: %v, want 403 %q", err, want)
		}
		_, err = pods.Create(ctx, quotaTestPod("fail-pod-for-extended-resource", quotaList("cpu=500m", "memory=100Mi", "ephemeral-storage=30Gi", "example.com/dongle=2"), quotaList("example.com/dongle=2")), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "requests.example.com/dongle=2") {
			t.Errorf("pod over extended resource: %v, want 403", err)
		}
		_, err = pods.Create(ctx, quotaTestPod("no-requests", nil, nil), metav1.CreateOptions{})
		if want := "failed quota: test-quota: must specify cpu,memory for: pause"; !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "failed quota: test-quota: must specify cpu for: pause; memory for: pause") {
			t.Errorf("pod without requests: %v, want 403 %q", err, want)
		}
		e.usedIs("test-quota", "refusals charged nothing", used)
		if err := pods.Delete(ctx, "test-pod", *metav1.NewDeleteOptions(0)); err != nil {
			t.Fatal(err)
		}
		e.usedIs("test-quota", "pod given back", quotaList("pods=0", "cpu=0", "memory=0", "ephemeral-storage=0", "requests.example.com/dongle=0"))
	})

	t.Run("status reset", func(t *testing.T) {
		rqs := cs.CoreV1().ResourceQuotas(e.ns)
		if _, err := rqs.Patch(ctx, "test-quota", types.MergePatchType, []byte(`{"status":{"hard":{"cpu":"2"},"used":{"cpu":"7"}}}`), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		e.usedIs("test-quota", "status reset", quotaList("cpu=0"))
	})
}

// TestResourceQuotaScopes checks the Terminating, NotTerminating,
// BestEffort and NotBestEffort scopes as the conformance specs do.
func TestResourceQuotaScopes(t *testing.T) {
	defer goleak.VerifyNone(t)
	h, stop := startHub(t, t.TempDir())
	defer stop()
	cs, _ := clientset(t, adminConfig(t, h))
	e := newQuotaEnv(t, cs, "quota-scopes")
	ctx := e.ctx
	pods := cs.CoreV1().Pods(e.ns)
	compute := quotaList("pods=5", "requests.cpu=1", "requests.memory=500Mi", "limits.cpu=2", "limits.memory=1Gi")
	e.createQuota("terminating", compute, corev1.ResourceQuotaScopeTerminating)
	e.createQuota("not-terminating", compute, corev1.ResourceQuotaScopeNotTerminating)
	e.createQuota("best-effort", quotaList("pods=5"), corev1.ResourceQuotaScopeBestEffort)
	e.createQuota("not-best-effort", quotaList("pods=5"), corev1.ResourceQuotaScopeNotBestEffort)
	zero := quotaList("pods=0", "requests.cpu=0", "requests.memory=0", "limits.cpu=0", "limits.memory=0")
	podUse := quotaList("pods=1", "requests.cpu=500m", "requests.memory=200Mi", "limits.cpu=1", "limits.memory=400Mi")
	requests, limits := quotaList("cpu=500m", "memory=200Mi"), quotaList("cpu=1", "memory=400Mi")

	if _, err := pods.Create(ctx, quotaTestPod("long", requests, limits), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.usedIs("not-terminating", "long-running pod charged", podUse)
	e.usedIs("terminating", "long-running pod not charged", zero)
	e.usedIs("not-best-effort", "burstable pod charged", quotaList("pods=1"))
	e.usedIs("best-effort", "burstable pod not charged", quotaList("pods=0"))
	if err := pods.Delete(ctx, "long", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	e.usedIs("not-terminating", "long-running pod given back", zero)
	e.usedIs("not-best-effort", "burstable pod given back", quotaList("pods=0"))

	p := quotaTestPod("deadline", requests, limits)
	p.Spec.ActiveDeadlineSeconds = new(int64(3600))
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.usedIs("terminating", "terminating pod charged", podUse)
	e.usedIs("not-terminating", "terminating pod not charged", zero)
	if err := pods.Delete(ctx, "deadline", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	e.usedIs("terminating", "terminating pod given back", zero)

	// A best-effort pod meets the compute quotas' constraint: it states
	// no cpu, so they refuse it, as upstream's do.
	_, err := pods.Create(ctx, quotaTestPod("best", nil, nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "failed quota: not-terminating: must specify") {
		t.Errorf("best-effort pod under compute quotas: %v, want 403 failed quota", err)
	}
	for _, n := range []string{"terminating", "not-terminating"} {
		if err := cs.CoreV1().ResourceQuotas(e.ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 10*time.Second, "best-effort pod admitted once the compute quotas are gone", func() (bool, string) {
		_, err := pods.Create(ctx, quotaTestPod("best", nil, nil), metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	e.usedIs("best-effort", "best-effort pod charged", quotaList("pods=1"))
	e.usedIs("not-best-effort", "best-effort pod not charged", quotaList("pods=0"))
}
