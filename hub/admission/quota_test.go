package admission

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/quota"
)

// rl parses "name=quantity" pairs into a ResourceList.
func rl(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range pairs {
		n, q, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(n)] = resource.MustParse(q)
	}
	return out
}

func counted(name string, hard, used corev1.ResourceList, scopes ...corev1.ResourceQuotaScope) *corev1.ResourceQuota {
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "1"},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard, Scopes: scopes},
		Status:     corev1.ResourceQuotaStatus{Hard: hard, Used: used},
	}
}

func quotaPod(name string, requests corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: requests}}}},
	}
}

func TestCharge(t *testing.T) {
	now := time.Now()
	cpuQuota := counted("compute", rl("pods=2", "requests.cpu=1", "requests.example.com/dongle=3"), rl("pods=1", "requests.cpu=500m", "requests.example.com/dongle=2"))
	terminating := quotaPod("t", rl("cpu=100m"))
	terminating.Spec.ActiveDeadlineSeconds = new(int64(60))
	tests := []struct {
		name     string
		obj, old runtime.Object
		gr       schema.GroupResource // pods when zero
		quotas   []*corev1.ResourceQuota
		wantUsed []corev1.ResourceList // of the charged quotas, in order
		wantErr  string
	}{
		{name: "fits", obj: quotaPod("p", rl("cpu=250m")), quotas: []*corev1.ResourceQuota{cpuQuota},
			wantUsed: []corev1.ResourceList{rl("pods=2", "requests.cpu=750m", "requests.example.com/dongle=2")}},
		{name: "exceeds cpu", obj: quotaPod("p", rl("cpu=600m", "memory=100Mi")), quotas: []*corev1.ResourceQuota{cpuQuota},
			wantErr: "exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=500m, limited: requests.cpu=1"},
		{name: "exceeds extended", obj: quotaPod("p", rl("cpu=100m", "example.com/dongle=2")), quotas: []*corev1.ResourceQuota{cpuQuota},
			wantErr: "exceeded quota: compute, requested: requests.example.com/dongle=2, used: requests.example.com/dongle=2, limited: requests.example.com/dongle=3"},
		{name: "missing request", obj: quotaPod("p", nil), quotas: []*corev1.ResourceQuota{cpuQuota},
			wantErr: "failed quota: compute: must specify requests.cpu for: c"},
		{name: "not counted yet", obj: quotaPod("p", rl("cpu=1")), quotas: []*corev1.ResourceQuota{counted("new", rl("pods=2"), nil)},
			wantErr: "status unknown for quota: new, resources: pods"},
		{name: "no status hard", obj: quotaPod("p", rl("cpu=1")), quotas: []*corev1.ResourceQuota{{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}, Spec: corev1.ResourceQuotaSpec{Hard: rl("pods=0")}}}},
		{name: "out of scope", obj: quotaPod("p", rl("cpu=1")), quotas: []*corev1.ResourceQuota{counted("t", rl("pods=0"), rl("pods=0"), corev1.ResourceQuotaScopeTerminating)}},
		{name: "in scope", obj: terminating, quotas: []*corev1.ResourceQuota{counted("t", rl("pods=1"), rl("pods=0"), corev1.ResourceQuotaScopeTerminating)},
			wantUsed: []corev1.ResourceList{rl("pods=1")}},
		{name: "unrelated quota", obj: quotaPod("p", nil), quotas: []*corev1.ResourceQuota{counted("s", rl("services=0"), rl("services=0"))}},
		{name: "negative", obj: quotaPod("p", rl("cpu=-1")), quotas: []*corev1.ResourceQuota{cpuQuota},
			wantErr: "quota usage is negative for resource(s): cpu,requests.cpu"},
		{name: "service to node port", gr: quota.Services,
			obj:     &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}},
			old:     &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{{Port: 80}}}},
			quotas:  []*corev1.ResourceQuota{counted("s", rl("services=2", "services.nodeports=0"), rl("services=1", "services.nodeports=0"))},
			wantErr: "exceeded quota: s, requested: services.nodeports=1, used: services.nodeports=0, limited: services.nodeports=0"},
		{name: "unchanged service", gr: quota.Services,
			obj:    &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}},
			old:    &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}},
			quotas: []*corev1.ResourceQuota{counted("s", rl("services=1"), rl("services=1"))}},
	}
	for _, tt := range tests {
		gr := tt.gr
		if gr.Resource == "" {
			gr = quota.Pods
		}
		got, err := Charge(gr, tt.obj, tt.old, tt.quotas, now)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%s: Charge = %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tt.wantUsed) {
			t.Errorf("%s: Charge = %d quotas, %v; want %d", tt.name, len(got), err, len(tt.wantUsed))
			continue
		}
		for i, q := range got {
			if !quota.Equal(q.Status.Used, tt.wantUsed[i]) {
				t.Errorf("%s: used %s, want %s", tt.name, quota.Format(q.Status.Used), quota.Format(tt.wantUsed[i]))
			}
		}
	}
	if quota.Format(cpuQuota.Status.Used) != "pods=1,requests.cpu=500m,requests.example.com/dongle=2" {
		t.Errorf("Charge modified its quota: %s", quota.Format(cpuQuota.Status.Used))
	}
}

// memQuotas is an in-memory QuotaStore whose listing lags its writes
// (as an informer's cache may) until sync is called, and whose status
// writes conflict on a stale resourceVersion.
type memQuotas struct {
	mu      sync.Mutex
	stored  map[string]*corev1.ResourceQuota
	cache   map[string]*corev1.ResourceQuota
	rv      int
	updates int
}

func newMemQuotas(qs ...*corev1.ResourceQuota) *memQuotas {
	m := &memQuotas{stored: map[string]*corev1.ResourceQuota{}, cache: map[string]*corev1.ResourceQuota{}}
	for _, q := range qs {
		m.rv++
		q = q.DeepCopy()
		q.ResourceVersion = strconv.Itoa(m.rv)
		m.stored[q.Name], m.cache[q.Name] = q, q
	}
	return m
}

func (m *memQuotas) ListQuotas(string) ([]*corev1.ResourceQuota, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*corev1.ResourceQuota
	for _, q := range m.cache {
		out = append(out, q)
	}
	return out, nil
}

func (m *memQuotas) GetQuota(_ context.Context, _, name string) (*corev1.ResourceQuota, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stored[name].DeepCopy(), nil
}

func (m *memQuotas) UpdateQuotaStatus(_ context.Context, q *corev1.ResourceQuota) (*corev1.ResourceQuota, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stored[q.Name].ResourceVersion != q.ResourceVersion {
		return nil, apierrors.NewConflict(quota.ResourceQuotas, q.Name, fmt.Errorf("stale"))
	}
	m.rv++
	m.updates++
	q = q.DeepCopy()
	q.ResourceVersion = strconv.Itoa(m.rv)
	m.stored[q.Name] = q
	return q.DeepCopy(), nil
}

// bump changes the stored quota behind the plugin's back, as the
// controller's writes do.
func (m *memQuotas) bump(name string, used corev1.ResourceList) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rv++
	q := m.stored[name].DeepCopy()
	q.ResourceVersion = strconv.Itoa(m.rv)
	q.Status.Used = used
	m.stored[name] = q
}

func (m *memQuotas) used(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return quota.Format(m.stored[name].Status.Used)
}

func createPod(name string) apiserver.AdmissionAttributes {
	return apiserver.AdmissionAttributes{Operation: apiserver.Create, Resource: quota.Pods, Namespace: "ns", Name: name, Object: quotaPod(name, nil)}
}

// TestResourceQuotaConcurrentCreates admits 10 pods at once under a
// quota of 4, with a listing that never catches up: exactly 4 are
// admitted, the rest refused with 403, and used is 4.
func TestResourceQuotaConcurrentCreates(t *testing.T) {
	store := newMemQuotas(counted("q", rl("pods=4"), rl("pods=0")))
	p := &ResourceQuota{Quotas: store}
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() { errs[i] = p.Admit(context.Background(), createPod(fmt.Sprintf("p%d", i))) })
	}
	wg.Wait()
	admitted := 0
	for _, err := range errs {
		switch {
		case err == nil:
			admitted++
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: q, requested: pods=1, used: pods=4, limited: pods=4"):
			t.Errorf("Admit = %v, want nil or 403 exceeded quota", err)
		}
	}
	if admitted != 4 || store.used("q") != "pods=4" {
		t.Errorf("admitted %d, used %s; want 4 and pods=4", admitted, store.used("q"))
	}
}

// TestResourceQuotaConflict charges a quota that another writer changed
// since the plugin last saw it: the write conflicts, the plugin reads
// the quota again and charges the fresh version.
func TestResourceQuotaConflict(t *testing.T) {
	store := newMemQuotas(counted("q", rl("pods=4"), rl("pods=0")))
	p := &ResourceQuota{Quotas: store}
	store.bump("q", rl("pods=2"))
	if err := p.Admit(context.Background(), createPod("a")); err != nil {
		t.Fatalf("Admit = %v", err)
	}
	if got := store.used("q"); got != "pods=3" {
		t.Errorf("used %s, want pods=3", got)
	}
	dry := createPod("b")
	dry.DryRun = true
	if err := p.Admit(context.Background(), dry); err != nil || store.used("q") != "pods=3" {
		t.Errorf("dry run: Admit = %v, used %s; want nil and pods=3", err, store.used("q"))
	}
	status := createPod("c")
	status.Subresource = "status"
	if err := p.Admit(context.Background(), status); err != nil || store.updates != 1 {
		t.Errorf("status write: Admit = %v, %d updates; want nil and 1", err, store.updates)
	}
}

// TestResourceQuotaLaggingListing creates a pod while the listing still
// shows a quota the controller has since counted: the plugin reads it
// from the store and charges it.
func TestResourceQuotaLaggingListing(t *testing.T) {
	store := newMemQuotas(&corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "ns"},
		Spec:       corev1.ResourceQuotaSpec{Hard: rl("pods=1")},
	})
	store.bump("q", rl("pods=0"))
	store.mu.Lock()
	q := store.stored["q"]
	q.Status.Hard = rl("pods=1")
	store.mu.Unlock()
	p := &ResourceQuota{Quotas: store}
	if err := p.Admit(context.Background(), createPod("a")); err != nil {
		t.Fatalf("Admit = %v", err)
	}
	if got := store.used("q"); got != "pods=1" {
		t.Errorf("used %s, want pods=1", got)
	}
	if err := p.Admit(context.Background(), createPod("b")); !apierrors.IsForbidden(err) {
		t.Errorf("second pod: Admit = %v, want 403", err)
	}
}
