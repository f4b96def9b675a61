package hubd

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-mesh/outpost/hub/aggregator"
	"github.com/outpost-mesh/outpost/hub/auth/rbac"
	"github.com/outpost-mesh/outpost/hub/pki"
)

// TestExtensionAuthenticationReadable: a hub keeps its front-proxy CA in
// its PKI directory, publishes kube-system/extension-apiserver-
// authentication, and bootstraps the Role that lets an extension API
// server's service account read that ConfigMap, and only that one, once
// bound to it, as upstream's sample-apiserver is.
func TestExtensionAuthenticationReadable(t *testing.T) {
	dir := t.TempDir()
	h, stop := startHub(t, dir, noControllers)
	defer stop()
	for _, f := range []string{pki.FrontProxyCACertFile, pki.FrontProxyCAKeyFile, pki.FrontProxyClientCertFile, pki.FrontProxyClientKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, PKIDir, f)); err != nil {
			t.Errorf("front-proxy file: %v", err)
		}
	}
	ctx := context.Background()
	admin, err := kubernetes.NewForConfig(adminConfig(t, h))
	if err != nil {
		t.Fatal(err)
	}
	role, err := admin.RbacV1().Roles("kube-system").Get(ctx, rbac.AuthenticationReaderRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 1 || role.Rules[0].ResourceNames[0] != aggregator.TrustName {
		t.Errorf("role %s rules = %v, want get/list/watch of configmap %s", role.Name, role.Rules, aggregator.TrustName)
	}
	if _, err := admin.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "wardler-auth-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: rbac.AuthenticationReaderRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "wardler"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := adminConfig(t, h)
	cfg.Impersonate.UserName = "system:serviceaccount:default:wardler"
	cfg.Impersonate.Groups = []string{"system:serviceaccounts", "system:authenticated"}
	wardler, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var cm *corev1.ConfigMap
	waitFor(t, "the service account reads extension-apiserver-authentication", func(ctx context.Context) (bool, error) {
		cm, err = wardler.CoreV1().ConfigMaps("kube-system").Get(ctx, aggregator.TrustName, metav1.GetOptions{})
		return err == nil, nil
	})
	if cm.Data[aggregator.KeyRequestHeaderCA] == "" || cm.Data[aggregator.KeyClientCA] == "" {
		t.Errorf("extension-apiserver-authentication = %v, want both CAs", cm.Data)
	}
	if _, err := wardler.CoreV1().ConfigMaps("kube-system").Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("service account reads another kube-system ConfigMap: %v, want Forbidden", err)
	}
}
