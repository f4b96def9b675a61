package hubd

import (
	"bytes"
	"context"
	"crypto/x509/pkix"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// kubectlDir holds kubectl of several minor versions, kubectl.1.27 to
// kubectl.1.33.
const kubectlDir = "/usr/lib/google-cloud-sdk/bin"

// TestKubectlAuth runs kubectl 1.27 and 1.33, the oldest and newest
// installed, as a user of a client certificate bound to view in one
// namespace: auth can-i (yes and no), can-i --list and whoami answer as
// upstream's, reads work there, and elsewhere and on writes kubectl
// prints upstream's 403.
func TestKubectlAuth(t *testing.T) {
	dir := t.TempDir()
	h, stop := startHub(t, dir)
	defer stop()
	ctx := context.Background()
	admin, err := kubernetes.NewForConfig(adminConfig(t, h))
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"a", "b"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.RbacV1().RoleBindings("a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "carol-views"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "carol"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// carol's kubeconfig: the admin's cluster, her certificate.
	ca, caKey := loadCA(t, dir)
	certPEM, keyPEM := userCredentials(t, ca, caKey, pkix.Name{CommonName: "carol", Organization: []string{"devs"}})
	cfg, err := clientcmd.LoadFromFile(h.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	cfg.AuthInfos = map[string]*clientcmdapi.AuthInfo{"carol": {ClientCertificateData: certPEM, ClientKeyData: keyPEM}}
	for _, c := range cfg.Contexts {
		c.AuthInfo = "carol"
	}
	kubeconfig := filepath.Join(dir, "carol.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}

	for _, version := range []string{"1.27", "1.33"} {
		t.Run("kubectl-"+version, func(t *testing.T) {
			bin := filepath.Join(kubectlDir, "kubectl."+version)
			if _, err := os.Stat(bin); err != nil {
				t.Skipf("kubectl %s not installed: %v", version, err)
			}
			kubectl := func(args ...string) (string, int) {
				t.Helper()
				cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
				cmd.Env = append(os.Environ(), "HOME="+dir)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				var exit *exec.ExitError
				switch {
				case errors.As(err, &exit):
					return out.String(), exit.ExitCode()
				case err != nil:
					t.Fatalf("kubectl %v: %v", args, err)
				}
				return out.String(), 0
			}
			// The view role reaches carol once aggregated.
			wait.For(t, 20*time.Second, "can-i list pods in a", func() (bool, string) {
				out, code := kubectl("auth", "can-i", "list", "pods", "-n", "a")
				return code == 0 && strings.TrimSpace(out) == "yes", out
			})
			for _, tc := range []struct {
				args []string
				code int
				want string
			}{
				{[]string{"auth", "can-i", "create", "configmaps", "-n", "a"}, 1, "no"},
				{[]string{"auth", "can-i", "list", "pods", "-n", "b"}, 1, "no"},
				{[]string{"auth", "can-i", "get", "secrets", "-n", "a"}, 1, "no"},
				{[]string{"get", "pods", "-n", "a"}, 0, "No resources found in a namespace."},
				{[]string{"get", "pods", "-n", "b"}, 1, `Error from server (Forbidden): pods is forbidden: User "carol" cannot list resource "pods" in API group "" in the namespace "b"`},
				{[]string{"create", "configmap", "x", "-n", "a"}, 1, `configmaps is forbidden: User "carol" cannot create resource "configmaps" in API group "" in the namespace "a"`},
			} {
				out, code := kubectl(tc.args...)
				if code != tc.code || !strings.Contains(out, tc.want) {
					t.Errorf("kubectl %s = exit %d:\n%s\nwant exit %d with %q", strings.Join(tc.args, " "), code, out, tc.code, tc.want)
				}
			}

			out, code := kubectl("auth", "can-i", "--list", "-n", "a")
			if code != 0 || !hasRow(out, "pods", "[get list watch]") || hasRow(out, "secrets", "") {
				t.Errorf("kubectl auth can-i --list -n a = exit %d:\n%s\nwant pods with [get list watch], no secrets", code, out)
			}
			out, code = kubectl("auth", "whoami")
			if code != 0 || !hasRow(out, "Username", "carol") || !hasRow(out, "Groups", "[devs system:authenticated]") {
				t.Errorf("kubectl auth whoami = exit %d:\n%s\nwant carol in [devs system:authenticated]", code, out)
			}

			// Impersonation: the admin may act as carol; carol may not
			// act as anyone.
			out, code = kubectl("--kubeconfig", h.KubeconfigPath(), "--as", "carol", "--as-group", "devs", "get", "pods", "-n", "b")
			if code != 1 || !strings.Contains(out, `pods is forbidden: User "carol" cannot list resource "pods" in API group "" in the namespace "b"`) {
				t.Errorf("kubectl --as carol get pods -n b = exit %d:\n%s\nwant carol's 403", code, out)
			}
			out, code = kubectl("--kubeconfig", h.KubeconfigPath(), "--as", "carol", "--as-group", "devs", "auth", "whoami")
			if code != 0 || !hasRow(out, "Username", "carol") || !hasRow(out, "Groups", "[devs system:authenticated]") {
				t.Errorf("kubectl --as carol auth whoami = exit %d:\n%s\nwant carol in [devs system:authenticated]", code, out)
			}
			out, code = kubectl("--as", "bob", "get", "pods", "-n", "a")
			if code != 1 || !strings.Contains(out, `users "bob" is forbidden: User "carol" cannot impersonate resource "users" in API group "" at the cluster scope`) {
				t.Errorf("kubectl --as bob as carol = exit %d:\n%s\nwant 403 on impersonation", code, out)
			}
		})
	}
}

// hasRow reports whether out, a table kubectl printed, has a row whose
// first column is first and whose text contains rest.
func hasRow(out, first, rest string) bool {
	return slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
		f := strings.Fields(l)
		return len(f) > 0 && f[0] == first && strings.Contains(l, rest)
	})
}
