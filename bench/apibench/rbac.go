package apibench

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/hub/pki"
)

// RBACUser is the user an RBAC run's creator and watchers act as: not in
// system:masters, so every request is decided by RBAC, allowed the
// workload's pods by a Role bound in the namespace, as a team's CI or a
// GitOps agent is. It authenticates with a client certificate the hub's
// CA signs, as the admin does, so that only authorization differs.
const RBACUser = "outpost-bench"

// rbacAccessTimeout bounds the wait for the RBAC cache to hold the
// binding.
const rbacAccessTimeout = 30 * time.Second

// grantRBACUser binds RBACUser, in namespace, to a Role allowing what the
// workload does with pods, as admin, and returns a client config that
// authenticates as RBACUser against the hub of base, with a client
// certificate signed by the CA under pkiDir. It returns once the user may
// list the pods.
func grantRBACUser(ctx context.Context, admin *client, base *rest.Config, pkiDir, namespace string) (*rest.Config, error) {
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"},
			Verbs: []string{"create", "get", "list", "watch", "delete", "deletecollection"}}},
	}
	if _, err := admin.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create role: %w", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-pods"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: RBACUser}},
	}
	if _, err := admin.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create role binding: %w", err)
	}
	certPEM, keyPEM, err := signUser(pkiDir, RBACUser)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(base)
	cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = certPEM, keyPEM, "", ""
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	defer c.close()
	deadline := time.Now().Add(rbacAccessTimeout)
	for {
		_, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return cfg, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s may not list pods after %v: %w", RBACUser, rbacAccessTimeout, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// signUser returns a client certificate and key for user, signed by the
// CA under pkiDir.
func signUser(pkiDir, user string) (certPEM, keyPEM []byte, err error) {
	caPEM, err := os.ReadFile(filepath.Join(pkiDir, pki.CACertFile))
	if err != nil {
		return nil, nil, err
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(pkiDir, pki.CAKeyFile))
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(caKeyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("hub CA: no PEM block")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("hub CA: %w", err)
	}
	caKey, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		if caKey, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			return nil, nil, fmt.Errorf("hub CA key: %w", err)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: user},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %s: %w", user, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// targetRBACCost is the most RBAC may cost of the creates/s of
// system:masters.
const targetRBACCost = 0.10

// Comparison is the workload run as system:masters and as RBACUser,
// alternately, each against a fresh hub: the cost of authorization by
// RBAC, with the rest of the path the same.
type Comparison struct {
	Machine report.Machine `json:"machine"`
	// Admin and RBAC are the median runs of each (see RunMedian).
	Admin *Report `json:"admin"`
	RBAC  *Report `json:"rbac"`
	// CreatesRatio is RBAC's creates/s over Admin's.
	CreatesRatio float64  `json:"creates_ratio"`
	Targets      []Target `json:"targets"`
}

// RunCompare runs the workload n times as system:masters and n times as
// RBACUser, alternating (a slow spell of a shared machine then falls on
// both), and compares the median runs.
func RunCompare(ctx context.Context, cfg Config, n int, progress io.Writer) (*Comparison, error) {
	if n < 1 {
		return nil, fmt.Errorf("run count %d is under 1", n)
	}
	if progress == nil {
		progress = io.Discard
	}
	var admin, user []*Report
	for i := range n {
		for _, asUser := range []bool{false, true} {
			c := cfg
			c.RBAC = asUser
			if i < n-1 {
				c.ProfileDir = ""
			}
			fmt.Fprintf(progress, "run %d of %d as %s\n", i+1, n, c.subject())
			rep, err := Run(ctx, c, progress)
			if err != nil {
				return nil, fmt.Errorf("run %d of %d as %s: %w", i+1, n, c.subject(), err)
			}
			if asUser {
				user = append(user, rep)
			} else {
				admin = append(admin, rep)
			}
		}
	}
	cmp := &Comparison{Machine: report.DescribeMachine(), Admin: medianReport(admin), RBAC: medianReport(user)}
	a, r := cmp.Admin.Result.Creates.PerSec, cmp.RBAC.Result.Creates.PerSec
	if a > 0 {
		cmp.CreatesRatio = r / a
	}
	t := Target{Goal: fmt.Sprintf("RBAC costs < %.0f%% of creates/s", targetRBACCost*100), Row: "creates/s",
		Detail: fmt.Sprintf("%.1f%%", (1-cmp.CreatesRatio)*100)}
	switch {
	case targetWorkload(cfg) != "":
		t.Status, t.Detail = TargetNA, targetWorkload(cfg)
	case cmp.CreatesRatio >= 1-targetRBACCost:
		t.Status = TargetMet
	default:
		t.Status = TargetMissed
	}
	cmp.Targets = []Target{t}
	return cmp, nil
}

// Render writes both reports and the comparison as text tables.
func (c *Comparison) Render(w io.Writer) error {
	fmt.Fprintf(w, "As system:masters (the admin):\n\n")
	if err := c.Admin.Render(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nAs %s, authorized by RBAC (a Role on pods bound in the namespace):\n\n", RBACUser)
	if err := c.RBAC.Render(w); err != nil {
		return err
	}
	a, r := c.Admin.Result, c.RBAC.Result
	tb := report.NewTable("RBAC against system:masters, medians of alternating runs", "metric", "admin", "rbac", "rbac/admin")
	row := func(name, av, rv string, ratio float64) { tb.AddRow(name, av, rv, fmt.Sprintf("%.3f", ratio)) }
	div := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return x / y
	}
	row("creates/s", report.Rate(a.Creates.PerSec), report.Rate(r.Creates.PerSec), c.CreatesRatio)
	row("create p50", report.Duration(a.Creates.Latency.P50), report.Duration(r.Creates.Latency.P50), div(float64(r.Creates.Latency.P50), float64(a.Creates.Latency.P50)))
	row("create p99", report.Duration(a.Creates.Latency.P99), report.Duration(r.Creates.Latency.P99), div(float64(r.Creates.Latency.P99), float64(a.Creates.Latency.P99)))
	row("watch p99", report.Duration(a.Watch.Latency.P99), report.Duration(r.Watch.Latency.P99), div(float64(r.Watch.Latency.P99), float64(a.Watch.Latency.P99)))
	perCreate := func(res *Result) float64 { return div(res.Hub.CreateCPUSeconds, float64(res.Creates.Created)) }
	row("hub CPU per create", fmt.Sprintf("%.0fµs", perCreate(a)*1e6), fmt.Sprintf("%.0fµs", perCreate(r)*1e6), div(perCreate(r), perCreate(a)))
	fmt.Fprintf(w, "\n%s\n%s", tb.String(), report.TargetTable(c.Targets))
	return nil
}

// subject names whom the workload acts as.
func (c Config) subject() string {
	if c.RBAC {
		return RBACUser
	}
	return "system:masters"
}
