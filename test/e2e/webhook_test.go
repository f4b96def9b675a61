package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outpost-mesh/outpost/internal/ociimage"
)

// TestServiceWebhookOnEdge: a mutating and a validating admission webhook
// served by a pod on an edge node, named by their Service, act on the
// hub's writes: the hub cannot dial the node, so it reaches the pod
// through the node's sync session.
func TestServiceWebhookOnEdge(t *testing.T) {
	if !enterContainerdTest(t) {
		return
	}
	f := newFleet(t)
	h := f.startHub()
	const site, name = "store-8", "e2e-hook-1"
	e, _ := startContainerdEdge(f, h, site, name, "outpost.test/busybox:1", nil)

	// The webhook's image: busybox and the webhook, a static binary.
	bin := filepath.Join(t.TempDir(), "webhook")
	build := exec.Command("go", "build", "-o", bin, "./testdata/webhook")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the webhook: %v\n%s", err, out)
	}
	const image = "outpost.test/webhook:1"
	im, err := ociimage.Busybox(image)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.AddHostFile(bin, "/webhook"); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(t.TempDir(), "webhook.tar")
	if err := im.WriteFile(tarball, false); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(outpostBinary(t), "image", "import", "--data-dir", e.dataDir, tarball).CombinedOutput(); err != nil {
		t.Fatalf("import the webhook's image: %v\n%s", err, out)
	}

	const ns = "hooks"
	caPEM, certPEM, keyPEM := webhookCertificate(t, "webhook."+ns+".svc")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := h.cs
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "webhook"}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook", Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "webhook", Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"/webhook"},
			Env:   []corev1.EnvVar{{Name: "TLS_CERT", Value: string(certPEM)}, {Name: "TLS_KEY", Value: string(keyPEM)}},
			Ports: []corev1.ContainerPort{{ContainerPort: 8443}},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(90*time.Second, "the webhook's pod Ready", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "webhook", metav1.GetOptions{})
		if err != nil {
			return false, apiProblem(err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("phase %s", p.Status.Phase)
	})

	f.eventually(30*time.Second, "the webhook's Service with a ready endpoint", func() (bool, string) {
		l, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, apiProblem(err)
		}
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready && len(s.Ports) > 0 {
					return true, ""
				}
			}
		}
		evs, _ := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		p, _ := cs.CoreV1().Pods(ns).Get(ctx, "webhook", metav1.GetOptions{})
		return false, fmt.Sprintf("slices %+v; events %+v; pod %+v", l.Items, evs.Items, p.Status)
	})

	// Only configmaps in namespaces labelled hooks=on, so that nothing
	// else the fleet writes waits on the webhook.
	scope := &metav1.LabelSelector{MatchLabels: map[string]string{"hooks": "on"}}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	none := admissionregistrationv1.SideEffectClassNone
	client := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "webhook", Path: &path},
			CABundle: caPEM,
		}
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-mutate"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mutate.outpost.test", ClientConfig: client("/mutate"), Rules: rules,
			NamespaceSelector: scope, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-validate"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "validate.outpost.test", ClientConfig: client("/validate"), Rules: rules,
			NamespaceSelector: scope, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hooked, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hooked.Labels["hooks"] = "on"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, hooked, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The hub's caches see the configurations and the namespace's label
	// soon after; until then a write goes unhooked, so each try is a
	// new object.
	try := 0
	f.eventually(30*time.Second, "a configmap labelled by the edge webhook", func() (bool, string) {
		try++
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("plain-%d", try)}}, metav1.CreateOptions{})
		if err != nil {
			return false, apiProblem(err)
		}
		return cm.Labels["mutated"] == "yes", fmt.Sprintf("labels %v", cm.Labels)
	})
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "refused", Labels: map[string]string{"deny": "yes"}}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "denied by the edge webhook") {
		t.Errorf("a configmap labelled deny=yes: %v, want the edge webhook's refusal", err)
	}
	// Elsewhere nothing calls it.
	other, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Labels: map[string]string{"deny": "yes"}}}, metav1.CreateOptions{})
	if err != nil || other.Labels["mutated"] != "" {
		t.Errorf("a configmap outside the hooked namespace: %v, %v; want it written unhooked", other.Labels, err)
	}
}

// webhookCertificate returns a CA and a serving certificate and key for
// dnsName signed by it, all PEM.
func webhookCertificate(t *testing.T, dnsName string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook-ca"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
