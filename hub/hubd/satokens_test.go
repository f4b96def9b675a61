package hubd

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/outpost-mesh/outpost/hub/admission"
	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/controllers"
	"github.com/outpost-mesh/outpost/hub/controllers/serviceaccount"
	"github.com/outpost-mesh/outpost/hub/pki"
	"github.com/outpost-mesh/outpost/hub/registry/core"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
)

// saHub is the part of a hub that service account tokens go through: the
// PKI, the store, the API server with its TokenRequest API, and the HTTP
// handler authenticating bearer tokens, served over TLS, wired as Run
// wires them.
type saHub struct {
	url     string
	handler *apiHandler
	certs   *pki.PKI
}

func startSAHub(t *testing.T) *saHub {
	t.Helper()
	log := testlog.New(t, slog.LevelInfo)
	dir := t.TempDir()
	pkiCfg := pki.DefaultConfig(filepath.Join(dir, PKIDir))
	pkiCfg.Logger = log
	certs, err := pki.Ensure(pkiCfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := badgerstore.Open(badgerstore.DefaultConfig(filepath.Join(dir, StoreDir)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tokens, err := newSATokens(DefaultSATokenConfig(filepath.Join(dir, PKIDir)), st)
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(apiserver.Config{Store: st, Resources: resources(core.DefaultServiceConfig(), st, nil), Logger: log, Admission: admission.NodeRestriction{}, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	if err := ensureNamespaces(context.Background(), api); err != nil {
		t.Fatal(err)
	}
	spec, err := newOpenAPIDocs(api.OpenAPIKinds())
	if err != nil {
		t.Fatal(err)
	}
	handler := newAPIHandler(st, certs.CAPool, log, api, spec, http.NotFoundHandler())
	handler.tokens = tokens.authn
	var ps parts
	t.Cleanup(ps.stop)
	if _, err := startRBAC(context.Background(), &ps, handler, st, nil, log); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(handler)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{certs.Serving}, ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(api.Shutdown)
	return &saHub{url: srv.URL, handler: handler, certs: certs}
}

// TestServiceAccountTokenAcceptance is the acceptance test of
// service account tokens: a client in a pod's place (client-go with a
// TokenRequest token and kube-root-ca.crt, as in-cluster config reads
// them) lists pods; the token of a deleted pod is refused; a node gets
// tokens only for its own pods.
func TestServiceAccountTokenAcceptance(t *testing.T) {
	h := startSAHub(t)
	log := testlog.New(t, slog.LevelInfo)
	ctx := context.Background()
	admin, md, err := inprocClientsAs(h.handler, hubUser, "test-admin", log)
	if err != nil {
		t.Fatal(err)
	}

	// The controller that publishes kube-root-ca.crt, as the hub runs it.
	b := record.NewBroadcaster()
	t.Cleanup(b.Shutdown)
	cc := controllers.Context{
		Client: admin, Metadata: md, Informers: informers.NewSharedInformerFactory(admin, 0),
		Events: func(c string) record.EventRecorder {
			return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: c})
		},
		Clock: clock.RealClock{}, Logger: log,
	}
	sac, err := serviceaccount.New(cc, h.certs.CACertPEM)
	if err != nil {
		t.Fatal(err)
	}
	bg := wait.Start(t, 30*time.Second, "serviceaccount controller", func(ctx context.Context) error {
		cc.Informers.Start(ctx.Done())
		defer cc.Informers.Shutdown()
		return sac.Run(ctx)
	})
	t.Cleanup(func() { bg.Stop() })

	// A namespace, a service account, a node and two pods bound to nodes.
	mustCreate := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = admin.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = admin.CoreV1().Secrets("shop").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}}, metav1.CreateOptions{})
	mustCreate(err)
	newPod := func(name, node string) *corev1.Pod {
		p, err := admin.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "web", Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{})
		mustCreate(err)
		return p
	}
	web := newPod("web", "edge-1")
	other := newPod("other", "edge-2")

	// The node asks for its pod's token, as kubelet does.
	node, _, err := inprocClientsAs(h.handler, nodeUser("edge-1"), "test-node", log)
	if err != nil {
		t.Fatal(err)
	}
	request := func(p *corev1.Pod) (*authenticationv1.TokenRequest, error) {
		return node.CoreV1().ServiceAccounts("shop").CreateToken(ctx, "web", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To[int64](3607),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID},
		}}, metav1.CreateOptions{})
	}
	tr, err := request(web)
	if err != nil {
		t.Fatalf("node's token request for its own pod: %v", err)
	}
	if life := time.Until(tr.Status.ExpirationTimestamp.Time); life < 59*time.Minute || life > 61*time.Minute || *tr.Spec.ExpirationSeconds != 3607 {
		t.Errorf("token reports a life of %v (%d s), want the hour asked for", life, *tr.Spec.ExpirationSeconds)
	}
	if _, err := request(other); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "node requested token bound to a pod scheduled on a different node") {
		t.Errorf("node's token request for another node's pod = %v, want 403", err)
	}

	// The pod's files, as kubelet projects them: the token, and ca.crt
	// from kube-root-ca.crt.
	var cm *corev1.ConfigMap
	wait.For(t, 20*time.Second, "kube-root-ca.crt in shop", func() (bool, string) {
		cm, err = admin.CoreV1().ConfigMaps("shop").Get(ctx, serviceaccount.RootCAName, metav1.GetOptions{})
		return err == nil, "not yet"
	})
	files := t.TempDir()
	tokenFile, caFile := filepath.Join(files, "token"), filepath.Join(files, "ca.crt")
	mustCreate(os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600))
	mustCreate(os.WriteFile(caFile, []byte(cm.Data[serviceaccount.RootCAKey]), 0o600))

	// rest.InClusterConfig, with the host it would read from the
	// KUBERNETES_SERVICE_* environment.
	inCluster := &rest.Config{Host: h.url, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}, BearerTokenFile: tokenFile}
	pod, err := kubernetes.NewForConfig(inCluster)
	if err != nil {
		t.Fatal(err)
	}
	// Service accounts may do nothing but discovery until RBAC grants
	// them more, as upstream.
	if _, err := pod.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list pods as a service account without a role = %v, want 403", err)
	}
	_, err = admin.RbacV1().Roles("shop").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = admin.RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "web-reads-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "shop", Name: "web"}}}, metav1.CreateOptions{})
	mustCreate(err)
	var pods *corev1.PodList
	wait.For(t, 10*time.Second, "the role binding to reach the RBAC cache", func() (bool, string) {
		pods, err = pod.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if len(pods.Items) != 2 {
		t.Errorf("listed %d pods, want 2", len(pods.Items))
	}
	if _, err := pod.CoreV1().Secrets("shop").Get(ctx, "db", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get secret as the service account = %v, want 403", err)
	}
	if _, err := pod.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list pods of another namespace = %v, want 403", err)
	}

	// The pod goes: its token goes with it.
	mustCreate(admin.CoreV1().Pods("shop").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	if _, err := pod.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("list pods with the token of a deleted pod = %v, want 401", err)
	}

	// A token that is not the hub's is refused too.
	mustCreate(os.WriteFile(tokenFile, []byte("not-a-token"), 0o600))
	forged, _ := kubernetes.NewForConfig(inCluster)
	if _, err := forged.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("list pods with a junk token = %v, want 401", err)
	}
}

func TestLoadSAKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), SAKeyFile)
	k1, err := loadSAKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	k2, err := loadSAKey(path)
	if err != nil || !k1.Equal(k2) {
		t.Errorf("second load = %v, same key %v; want the key made first", err, k1.Equal(k2))
	}
	os.WriteFile(path, []byte("junk"), 0o600)
	if _, err := loadSAKey(path); err == nil || !strings.Contains(err.Error(), "holds no PEM block") {
		t.Errorf("load of a junk key file = %v", err)
	}
}
