package helm

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/kube"
	ri "helm.sh/helm/v4/pkg/release"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

const (
	// ns is the namespace the release goes to; Install creates it, as
	// `helm install --create-namespace`.
	ns = "shop"
	// releaseName names the release and so every object of the chart.
	releaseName = "front"
	// node is the edge node the Deployment's pods run on.
	node = "edge-1"
)

// widgets is the custom resource the chart's crds/ directory defines.
var widgets = schema.GroupVersionResource{Group: "shop.outpost.dev", Version: "v1", Resource: "widgets"}

// TestChartLifecycle drives a release of testdata/shop through Helm 4's
// actions as `helm install --wait`, `helm status`, `helm upgrade`,
// `helm rollback` and `helm uninstall` do, checking after each step what
// the hub holds. Its Deployment's pods run on an edge node (an agent on
// the fake runtime), and --wait returns once they are available there.
func TestChartLifecycle(t *testing.T) {
	lifecycle(t, 1, 2)
}

// TestChartLifecycleNoPods is TestChartLifecycle with the Deployment
// scaled to zero throughout, so that it needs no node: what it checks is
// Helm's handling of every kind, not the pods' readiness.
func TestChartLifecycleNoPods(t *testing.T) {
	lifecycle(t, 0, 0)
}

// lifecycle installs the chart with replicas pods, upgrades it to
// upReplicas with another greeting, rolls it back to its first revision
// and uninstalls it, checking the hub after each step.
func lifecycle(t *testing.T, replicas, upReplicas int32) {
	ctx := context.Background()
	h := hubtest.Start(t, func(c *hubd.Config) { c.SyncAddr = "127.0.0.1:0" })
	if replicas > 0 || upReplicas > 0 {
		startEdge(t, h)
	}
	t.Cleanup(func() { dumpOnFailure(t, h) })

	ch, err := loader.Load(filepath.Join("testdata", "shop"))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	cfg := actionConfig(t, h.KubeconfigPath())
	dyn, err := dynamic.NewForConfig(h.Config)
	if err != nil {
		t.Fatal(err)
	}

	// helm install --create-namespace --set replicas=N --wait --timeout 1m
	in := action.NewInstall(cfg)
	in.ReleaseName = releaseName
	in.Namespace = ns
	in.CreateNamespace = true
	in.WaitStrategy = kube.StatusWatcherStrategy
	in.Timeout = time.Minute
	rel := release(t, "install")(in.RunWithContext(ctx, ch, map[string]any{"replicas": replicas}))
	if rel.Info.Status != rcommon.StatusDeployed || rel.Version != 1 {
		t.Fatalf("install: release %s revision %d, want deployed revision 1", rel.Info.Status, rel.Version)
	}
	// --wait returned, so the Deployment is available, on the edge node.
	checkAvailable(t, h, replicas)
	checkObjects(t, h, dyn, "hello", replicas)

	// helm status --show-resources
	st := action.NewStatus(cfg)
	st.ShowResourcesTable = true
	rel = release(t, "status")(st.Run(releaseName))
	if rel.Info.Status != rcommon.StatusDeployed || rel.Version != 1 {
		t.Fatalf("status: release %s revision %d, want deployed revision 1", rel.Info.Status, rel.Version)
	}
	checkStatusResources(t, rel, replicas > 0)

	// helm upgrade --set greeting=bonjour,replicas=M --wait
	up := action.NewUpgrade(cfg)
	up.Namespace = ns
	up.WaitStrategy = kube.StatusWatcherStrategy
	up.Timeout = time.Minute
	rel = release(t, "upgrade")(up.RunWithContext(ctx, releaseName, ch, map[string]any{"greeting": "bonjour", "replicas": upReplicas}))
	if rel.Info.Status != rcommon.StatusDeployed || rel.Version != 2 {
		t.Fatalf("upgrade: release %s revision %d, want deployed revision 2", rel.Info.Status, rel.Version)
	}
	checkAvailable(t, h, upReplicas)
	checkObjects(t, h, dyn, "bonjour", upReplicas)

	// helm rollback front 1 --wait
	rb := action.NewRollback(cfg)
	rb.Version = 1
	rb.WaitStrategy = kube.StatusWatcherStrategy
	rb.Timeout = time.Minute
	if err := rb.Run(releaseName); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	rel = release(t, "status after rollback")(action.NewStatus(cfg).Run(releaseName))
	if rel.Info.Status != rcommon.StatusDeployed || rel.Version != 3 {
		t.Fatalf("after rollback: release %s revision %d, want deployed revision 3", rel.Info.Status, rel.Version)
	}
	checkAvailable(t, h, replicas)
	checkObjects(t, h, dyn, "hello", replicas)
	checkHistory(t, cfg)

	// helm uninstall --wait
	un := action.NewUninstall(cfg)
	un.WaitStrategy = kube.StatusWatcherStrategy
	un.Timeout = time.Minute
	if _, err := un.Run(releaseName); err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	checkGone(t, h, dyn)
	if _, err := action.NewStatus(cfg).Run(releaseName); err == nil {
		t.Errorf("status after uninstall: no error, want release not found")
	}
}

// release returns a function that takes what an action returned and gives
// the Helm v1 release in it, failing the test (named by what) on an error.
func release(t *testing.T, what string) func(ri.Releaser, error) *releasev1.Release {
	return func(r ri.Releaser, err error) *releasev1.Release {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		rel, ok := r.(*releasev1.Release)
		if !ok {
			t.Fatalf("%s returned a %T, want a *v1.Release", what, r)
		}
		return rel
	}
}

// actionConfig builds Helm's action configuration as the helm command does
// for --kubeconfig path --namespace ns: Helm's kube client over
// cli-runtime's ConfigFlags, releases kept in Secrets of ns. Its discovery
// cache lives in a temporary directory rather than the user's home.
func actionConfig(t *testing.T, kubeconfig string) *action.Configuration {
	t.Helper()
	namespace, cache := ns, t.TempDir()
	flags := genericclioptions.NewConfigFlags(true)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &namespace
	flags.CacheDir = &cache
	flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
		c.Burst = 100 // the helm command's default --burst-limit
		return c
	}
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(testlog.New(t, slog.LevelInfo).Handler()))
	if err := cfg.Init(flags, ns, "secret"); err != nil {
		t.Fatalf("action configuration: %v", err)
	}
	return cfg
}

// startEdge joins an edge agent on the fake runtime to h's sync endpoint
// and waits until its Node is Ready, so that the scheduler places the
// chart's pods on it and they run.
func startEdge(t *testing.T, h *hubtest.Hub) {
	t.Helper()
	ctx := context.Background()
	id, secret := auth.GenerateToken()
	tok := auth.NewBootstrapTokenSecret(id, secret, "store-1", time.Hour, time.Now())
	if _, err := h.Client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, tok, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(h.Config.CAData)
	if b == nil {
		t.Fatal("the admin kubeconfig holds no PEM CA")
	}
	ca, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.DefaultConfig()
	cfg.NodeName = node
	cfg.Site = "store-1"
	cfg.DataDir = t.TempDir()
	cfg.HubAddr = h.SyncAddr()
	cfg.Token = id + "." + secret
	cfg.CAHash = wire.CAHash(ca)
	cfg.Runtime = fake.New(fake.Config{})
	cfg.RuntimeVersion = "fake://test"
	cfg.Capacity = agent.Capacity{CPUMillis: 4000, MemoryBytes: 4 << 30, Pods: 110}
	cfg.Logger = testlog.New(t, slog.LevelInfo).With("node", node)
	cfg.Sync.MinBackoff = 100 * time.Millisecond
	cfg.Sync.MaxBackoff = time.Second
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, time.Minute, "agent Run", a.Run)
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("agent Run returned %v after cancel, want nil", err)
		}
	})
	wait.For(t, 30*time.Second, "node "+node+" Ready", func() (bool, string) {
		n, err := h.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, c.Message
			}
		}
		return false, "no Ready condition"
	})
}

// checkAvailable checks that the release's Deployment has replicas
// available pods of its current template, each Ready on the edge node.
func checkAvailable(t *testing.T, h *hubtest.Hub, replicas int32) {
	t.Helper()
	ctx := context.Background()
	d, err := h.Client.AppsV1().Deployments(ns).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.ObservedGeneration != d.Generation || d.Status.UpdatedReplicas != replicas || d.Status.AvailableReplicas != replicas || !deploymentAvailable(d) {
		t.Fatalf("deployment %s after --wait: generation %d observed %d, replicas %d updated %d available %d, conditions %v; want %d available of generation %d",
			d.Name, d.Generation, d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.Conditions, replicas, d.Generation)
	}
	sel := metav1.FormatLabelSelector(d.Spec.Selector)
	pods, err := h.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName == node && podReady(&p) {
			ready++
		}
	}
	if ready < int(replicas) {
		t.Fatalf("pods of %s Ready on %s: %d, want %d", d.Name, node, ready, replicas)
	}
}

// deploymentAvailable reports whether d's Available condition is True.
func deploymentAvailable(d *appsv1.Deployment) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podReady reports whether p's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkObjects checks that every object of the chart is in the hub with
// the values greeting and replicas rendered into it.
func checkObjects(t *testing.T, h *hubtest.Hub, dyn dynamic.Interface, greeting string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	cm, err := h.Client.CoreV1().ConfigMaps(ns).Get(ctx, releaseName+"-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["greeting"]; got != greeting {
		t.Errorf("configmap greeting = %q, want %q", got, greeting)
	}
	if got := cm.Labels["app.kubernetes.io/managed-by"]; got != "Helm" {
		t.Errorf("configmap label managed-by = %q, want Helm", got)
	}
	if got := cm.Annotations["meta.helm.sh/release-name"]; got != releaseName {
		t.Errorf("configmap annotation release-name = %q, want %q", got, releaseName)
	}
	d, err := h.Client.AppsV1().Deployments(ns).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
		t.Errorf("deployment replicas = %v, want %d", d.Spec.Replicas, replicas)
	}
	if got := d.Spec.Template.Spec.ServiceAccountName; got != releaseName {
		t.Errorf("deployment serviceAccountName = %q, want %q", got, releaseName)
	}
	gets := map[string]func() error{
		"service": func() error {
			s, err := h.Client.CoreV1().Services(ns).Get(ctx, releaseName, metav1.GetOptions{})
			if err == nil && s.Spec.ClusterIP == "" {
				err = errors.New("no cluster IP")
			}
			return err
		},
		"serviceaccount": func() error {
			_, err := h.Client.CoreV1().ServiceAccounts(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"role": func() error {
			_, err := h.Client.RbacV1().Roles(ns).Get(ctx, releaseName+"-reader", metav1.GetOptions{})
			return err
		},
		"rolebinding": func() error {
			_, err := h.Client.RbacV1().RoleBindings(ns).Get(ctx, releaseName+"-reader", metav1.GetOptions{})
			return err
		},
		"poddisruptionbudget": func() error {
			_, err := h.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"ingress": func() error {
			_, err := h.Client.NetworkingV1().Ingresses(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"networkpolicy": func() error {
			_, err := h.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
	}
	for kind, get := range gets {
		if err := get(); err != nil {
			t.Errorf("%s %s: %v", kind, releaseName, err)
		}
	}
	w, err := dyn.Resource(widgets).Namespace(ns).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("widget %s: %v", releaseName, err)
	}
	spec, _ := w.Object["spec"].(map[string]any)
	if spec["color"] != greeting || fmt.Sprint(spec["size"]) != fmt.Sprint(replicas+1) {
		t.Errorf("widget spec = %v, want color %q size %d", spec, greeting, replicas+1)
	}
}

// checkStatusResources checks that `helm status --show-resources` found
// every kind of the chart in the cluster, as Tables (it asks for them with
// as=Table), and the Deployment's pods when it has some. Helm keys them
// "version/Kind".
func checkStatusResources(t *testing.T, rel *releasev1.Release, pods bool) {
	t.Helper()
	want := []string{"v1/ConfigMap", "v1/Deployment", "v1/Ingress", "v1/NetworkPolicy", "v1/PodDisruptionBudget",
		"v1/Role", "v1/RoleBinding", "v1/Service", "v1/ServiceAccount", "v1/Widget"}
	if pods {
		want = append(want, "v1/Pod(related)")
	}
	for _, key := range want {
		objs := rel.Info.Resources[key]
		if len(objs) == 0 {
			t.Errorf("status resources[%q] is empty; have %v", key, slices.Sorted(maps.Keys(rel.Info.Resources)))
			continue
		}
		// Helm's builder decodes what it asked as=Table for into
		// Unstructured: the server's Table, kind and all.
		if kind := objs[0].GetObjectKind().GroupVersionKind(); kind != metav1.SchemeGroupVersion.WithKind("Table") {
			t.Errorf("status resources[%q] hold a %v, want a meta.k8s.io/v1 Table", key, kind)
		}
	}
}

// checkHistory checks that `helm history` lists the three revisions, the
// last one deployed and the others superseded.
func checkHistory(t *testing.T, cfg *action.Configuration) {
	t.Helper()
	hs, err := action.NewHistory(cfg).Run(releaseName)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	var got []string
	for _, r := range hs {
		rel := release(t, "history")(r, nil)
		got = append(got, fmt.Sprintf("%d:%s", rel.Version, rel.Info.Status))
	}
	want := fmt.Sprint([]string{"1:superseded", "2:superseded", "3:deployed"})
	if fmt.Sprint(got) != want {
		t.Errorf("history = %v, want %s", got, want)
	}
}

// checkGone waits for every object of the release to be deleted (pods
// included, through the garbage collector) and checks that the CRD stays,
// as Helm never deletes what crds/ installed.
func checkGone(t *testing.T, h *hubtest.Hub, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	gets := map[string]func() error{
		"configmap": func() error {
			_, err := h.Client.CoreV1().ConfigMaps(ns).Get(ctx, releaseName+"-config", metav1.GetOptions{})
			return err
		},
		"deployment": func() error {
			_, err := h.Client.AppsV1().Deployments(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"service": func() error {
			_, err := h.Client.CoreV1().Services(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"serviceaccount": func() error {
			_, err := h.Client.CoreV1().ServiceAccounts(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"role": func() error {
			_, err := h.Client.RbacV1().Roles(ns).Get(ctx, releaseName+"-reader", metav1.GetOptions{})
			return err
		},
		"rolebinding": func() error {
			_, err := h.Client.RbacV1().RoleBindings(ns).Get(ctx, releaseName+"-reader", metav1.GetOptions{})
			return err
		},
		"poddisruptionbudget": func() error {
			_, err := h.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"ingress": func() error {
			_, err := h.Client.NetworkingV1().Ingresses(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"networkpolicy": func() error {
			_, err := h.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"widget": func() error {
			_, err := dyn.Resource(widgets).Namespace(ns).Get(ctx, releaseName, metav1.GetOptions{})
			return err
		},
		"pods": func() error {
			pods, err := h.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err == nil && len(pods.Items) == 0 {
				err = apierrors.NewNotFound(corev1.Resource("pods"), "")
			}
			return err
		},
	}
	wait.For(t, time.Minute, "the release's objects deleted", func() (bool, string) {
		for kind, get := range gets {
			if err := get(); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%s: %v", kind, err)
			}
		}
		return true, ""
	})
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Get(ctx, widgets.GroupResource().String(), metav1.GetOptions{}); err != nil {
		t.Errorf("CRD %s after uninstall: %v, want it kept", widgets.GroupResource(), err)
	}
}

// dumpOnFailure logs, when t failed, what the workload's objects say of
// their state, to tell a pod that did not run from a status not reported.
func dumpOnFailure(t *testing.T, h *hubtest.Hub) {
	if !t.Failed() {
		return
	}
	ctx := context.Background()
	if ds, err := h.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range ds.Items {
			t.Logf("deployment %s generation %d spec.replicas %v status %+v", d.Name, d.Generation, *d.Spec.Replicas, d.Status)
		}
	}
	if rss, err := h.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, rs := range rss.Items {
			t.Logf("replicaset %s spec.replicas %v status %+v", rs.Name, *rs.Spec.Replicas, rs.Status)
		}
	}
	if pods, err := h.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			t.Logf("pod %s node %q phase %s conditions %+v containers %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
	}
}
