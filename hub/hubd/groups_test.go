package hubd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/internal/wait"
)

// TestCertificateSigningRequest: a client certificate asked for with a
// CertificateSigningRequest, approved by an admin, is issued by the hub's
// certificate controller (acting under its own role), and authenticates
// its user to the hub.
func TestCertificateSigningRequest(t *testing.T) {
	h, _ := startHub(t, t.TempDir())
	admin := adminConfig(t, h)
	cs := kubernetes.NewForConfigOrDie(admin)
	ctx := context.Background()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "alice", Organization: []string{"dev"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	csr, err := csrs.Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if csr.Spec.Username == "" || !slices.Contains(csr.Spec.Groups, "system:masters") {
		t.Errorf("requestor %q %v, want the admin who created it", csr.Spec.Username, csr.Spec.Groups)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "approved by the test",
	})
	if _, err := csrs.UpdateApproval(ctx, "alice", csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var certPEM []byte
	wait.For(t, 30*time.Second, "the certificate to be issued", func() (bool, string) {
		got, err := csrs.Get(ctx, "alice", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		certPEM = got.Status.Certificate
		return len(certPEM) > 0, fmt.Sprintf("conditions %v", got.Status.Conditions)
	})

	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	alice := rest.AnonymousClientConfig(admin)
	alice.CertData = certPEM
	alice.KeyData = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	review, err := kubernetes.NewForConfigOrDie(alice).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != "alice" || !slices.Contains(u.Groups, "dev") {
		t.Errorf("whoami with the issued certificate: %q %v, want alice in dev", u.Username, u.Groups)
	}
}

// TestPriorityAndAutoscaling: pods get the priority of their class by
// admission (a class that does not exist is refused), and a
// HorizontalPodAutoscaler written as autoscaling/v1 reads as v2.
func TestPriorityAndAutoscaling(t *testing.T) {
	h, _ := startHub(t, t.TempDir(), noControllers)
	cs := kubernetes.NewForConfigOrDie(adminConfig(t, h))
	ctx := context.Background()

	pod := func(name, class string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			PriorityClassName: class, Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
		}}
	}
	got, err := cs.CoreV1().Pods("kube-system").Create(ctx, pod("critical", "system-cluster-critical"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Priority == nil || *got.Spec.Priority != 2000000000 || got.Spec.PreemptionPolicy == nil {
		t.Errorf("priority %v preemption %v, want 2000000000 from system-cluster-critical", got.Spec.Priority, got.Spec.PreemptionPolicy)
	}
	got, err = cs.CoreV1().Pods("default").Create(ctx, pod("plain", ""), metav1.CreateOptions{})
	if err != nil || got.Spec.Priority == nil || *got.Spec.Priority != 0 {
		t.Errorf("pod without a class: priority %v, %v; want 0", got.Spec.Priority, err)
	}
	_, err = cs.CoreV1().Pods("default").Create(ctx, pod("lost", "no-such-class"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("pod of a missing class: %v, want 403", err)
	}

	if _, err := cs.AutoscalingV1().HorizontalPodAutoscalers("default").Create(ctx, &autoscalingv1.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: autoscalingv1.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MaxReplicas:    5,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v2, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || len(v2.Spec.Metrics) != 1 || v2.Spec.Metrics[0].Resource == nil || *v2.Spec.Metrics[0].Resource.Target.AverageUtilization != 80 {
		t.Errorf("v1 HPA read as v2: %+v, %v; want the default 80%% CPU metric", v2.Spec, err)
	}
}
