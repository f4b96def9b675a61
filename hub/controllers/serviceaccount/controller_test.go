package serviceaccount_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/serviceaccount"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// newContext returns a controllers.Context over client and md.
func newContext(t *testing.T, client kubernetes.Interface, md metadata.Interface) controllers.Context {
	t.Helper()
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	t.Cleanup(b.Shutdown)
	return controllers.Context{
		Client:    client,
		Metadata:  md,
		Informers: informers.NewSharedInformerFactory(client, 0),
		Events: func(component string) record.EventRecorder {
			return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
		},
		Clock:  clock.RealClock{},
		Logger: testlog.New(t, slog.LevelInfo),
	}
}

// run builds the controller over c and runs it, with c's informers, until
// the test ends.
func run(t *testing.T, c controllers.Context, caPEM []byte) {
	t.Helper()
	ctl, err := serviceaccount.New(c, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "controller Run", func(ctx context.Context) error {
		c.Informers.Start(ctx.Done())
		defer c.Informers.Shutdown()
		return ctl.Run(ctx)
	})
	t.Cleanup(func() {
		if err := bg.Stop(); err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
}

// TestController runs the controller against a real hub: every namespace
// gets its default service account and kube-root-ca.crt at once, and they
// come back when deleted or edited.
func TestController(t *testing.T) {
	h := hubtest.Start(t, func(c *hubd.Config) { c.Controllers = false })
	caPEM := h.Config.TLSClientConfig.CAData
	run(t, newContext(t, h.Client, h.Metadata), caPEM)
	ctx := context.Background()
	cs := h.Client.CoreV1()

	// has waits for the default service account and a good config map in
	// ns, and returns them.
	has := func(ns string) (*corev1.ServiceAccount, *corev1.ConfigMap) {
		t.Helper()
		var sa *corev1.ServiceAccount
		var cm *corev1.ConfigMap
		wait.For(t, 20*time.Second, "default service account and kube-root-ca.crt in "+ns, func() (bool, string) {
			var err error
			if sa, err = cs.ServiceAccounts(ns).Get(ctx, serviceaccount.DefaultName, metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			if cm, err = cs.ConfigMaps(ns).Get(ctx, serviceaccount.RootCAName, metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			if cm.Data[serviceaccount.RootCAKey] != string(caPEM) || len(cm.Data) != 1 || cm.Annotations[serviceaccount.DescriptionAnnotation] == "" {
				return false, "config map holds " + strings.Join(keys(cm.Data), ",")
			}
			return true, ""
		})
		return sa, cm
	}
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		has(ns)
	}
	if _, err := cs.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, cm := has("app")

	if err := cs.ServiceAccounts("app").Delete(ctx, serviceaccount.DefaultName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.ConfigMaps("app").Delete(ctx, serviceaccount.RootCAName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sa2, cm2 := has("app")
	if sa2.UID == sa.UID || cm2.UID == cm.UID {
		t.Errorf("after deletes, the same objects: service account %s (was %s), config map %s (was %s)", sa2.UID, sa.UID, cm2.UID, cm.UID)
	}

	edited := cm2.DeepCopy()
	edited.Data[serviceaccount.RootCAKey] = "not a CA"
	edited.Data["extra"] = "x"
	if _, err := cs.ConfigMaps("app").Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, cm3 := has("app")
	if cm3.UID != cm2.UID {
		t.Errorf("an edited config map was re-created, not repaired")
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestControllerRefusals: writes the API refuses for good are Warning
// events on the namespace and are retried with back-off; a namespace
// being deleted gets nothing.
func TestControllerRefusals(t *testing.T) {
	caPEM := testca.CertPEM(testca.New(t).Cert.Raw)
	client := fake.NewSimpleClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "going"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
	)
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("serviceaccounts"), serviceaccount.DefaultName, errors.New("no"))
	})
	run(t, newContext(t, client, metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())), caPEM)
	wait.For(t, 20*time.Second, "a FailedCreate event and the config map", func() (bool, string) {
		evs, _ := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		_, err := client.CoreV1().ConfigMaps("app").Get(context.Background(), serviceaccount.RootCAName, metav1.GetOptions{})
		for _, e := range evs.Items {
			if e.Reason == "FailedCreate" && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == "app" && err == nil {
				return true, ""
			}
		}
		return false, "no event yet"
	})
	if l, _ := client.CoreV1().ConfigMaps("going").List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("a terminating namespace got %d config maps", len(l.Items))
	}
}

func TestNewRefusesABadCA(t *testing.T) {
	c := newContext(t, fake.NewSimpleClientset(), metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()))
	for _, ca := range []string{"", "junk", "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"} {
		if _, err := serviceaccount.New(c, []byte(ca)); err == nil {
			t.Errorf("New with CA %q succeeded", ca)
		}
	}
}
