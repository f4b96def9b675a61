package resourcequota_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/hub/quota"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// list parses "name=quantity" pairs into a ResourceList.
func list(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, p := range pairs {
		n, q, _ := strings.Cut(p, "=")
		out[corev1.ResourceName(n)] = resource.MustParse(q)
	}
	return out
}

// TestQuotaStatusOnARealHub runs a hub with its controllers: a quota
// created over existing objects gets its status counted, deleting them
// gives their use back, a change of its limits is reflected in
// status.hard, and a status written by hand is put right.
func TestQuotaStatusOnARealHub(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	ns := "default"
	pods := h.Client.CoreV1().Pods(ns)
	quotas := h.Client.CoreV1().ResourceQuotas(ns)
	for i, cpu := range []string{"250m", "500m"} {
		if _, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i)},
			Spec: corev1.PodSpec{SchedulerName: "test-nobody", Containers: []corev1.Container{{
				Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: list("cpu="+cpu, "memory=10Mi")},
			}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The quota is to count the CA bundle the serviceaccount controller
	// publishes too: creates are charged by admission, not counted here.
	wait.For(t, 10*time.Second, "kube-root-ca.crt published", func() (bool, string) {
		_, err := h.Client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	cms, err := h.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hard := list("pods=5", "requests.cpu=2", "cpu=2", "configmaps=10", "resourcequotas=1", "count/replicasets.apps=3", "services.nodeports=2")
	if _, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	statusIs := func(what string, hard, used corev1.ResourceList) {
		t.Helper()
		wait.For(t, 10*time.Second, what, func() (bool, string) {
			q, err := quotas.Get(ctx, "q", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return quota.Equal(q.Status.Hard, hard) && quota.Equal(q.Status.Used, used),
				fmt.Sprintf("hard %s used %s", quota.Format(q.Status.Hard), quota.Format(q.Status.Used))
		})
	}
	statusIs("status counted", hard, list("pods=2", "requests.cpu=750m", "cpu=750m", fmt.Sprintf("configmaps=%d", len(cms.Items)),
		"resourcequotas=1", "count/replicasets.apps=0", "services.nodeports=0"))

	if err := pods.Delete(ctx, "p0", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	statusIs("pod's use given back", hard, list("pods=1", "requests.cpu=500m", "cpu=500m", fmt.Sprintf("configmaps=%d", len(cms.Items)),
		"resourcequotas=1", "count/replicasets.apps=0", "services.nodeports=0"))

	hard = list("pods=3", "requests.cpu=1")
	if _, err := quotas.Patch(ctx, "q", types.MergePatchType, []byte(`{"spec":{"hard":{"pods":"3","requests.cpu":"1","cpu":null,"configmaps":null,"resourcequotas":null,"count/replicasets.apps":null,"services.nodeports":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	statusIs("limits changed", hard, list("pods=1", "requests.cpu=500m"))

	if _, err := quotas.Patch(ctx, "q", types.MergePatchType, []byte(`{"status":{"hard":{"pods":"7"},"used":null}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	statusIs("status put right", hard, list("pods=1", "requests.cpu=500m"))
}
