// Package csrsigning is the hub's signer of CertificateSigningRequests for
// kubernetes.io/kube-apiserver-client, as upstream's
// kube-controller-manager runs csrsigning-kube-apiserver-client: it issues
// approved requests a certificate from its Signer (the hub's CA, which the
// hub's API trusts for client authentication), fails those that ask for
// usages the signer does not give, and leaves other signers' requests
// alone. Approval is someone else's (kubectl certificate approve).
package csrsigning

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Workers is how many requests are worked on at once.
const Workers = 2

// Config configures the controller.
type Config struct {
	// Signer issues the certificates; non-nil.
	Signer Signer
	// MaxLifetime is the longest certificate issued, and that of requests
	// without spec.expirationSeconds; at least 10 minutes.
	MaxLifetime time.Duration
}

// DefaultConfig returns upstream's defaults with signer.
func DefaultConfig(signer Signer) Config {
	return Config{
		Signer:      signer,
		MaxLifetime: 365 * 24 * time.Hour, // kube-controller-manager's --cluster-signing-duration
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Signer == nil:
		return errors.New("csrsigning: nil Signer")
	case c.MaxLifetime < minLifetime:
		return fmt.Errorf("csrsigning: MaxLifetime %v is below %v", c.MaxLifetime, minLifetime)
	}
	return nil
}

// Controller signs approved requests for SignerName. Make one with New.
type Controller struct {
	cfg    Config
	client kubernetes.Interface
	csrs   certificateslisters.CertificateSigningRequestLister
	synced cache.InformerSynced
	clock  clock.WithTicker
	events record.EventRecorder
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller from c and cfg and registers its handlers on
// the CSR informer. It starts nothing.
func New(c controllers.Context, cfg Config) (*Controller, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	inf := c.Informers.Certificates().V1().CertificateSigningRequests()
	sc := &Controller{
		cfg:    cfg,
		client: c.Client,
		csrs:   inf.Lister(),
		synced: inf.Informer().HasSynced,
		clock:  c.Clock,
		events: c.Events("csrsigning-controller"),
		log:    c.Logger,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csrsigning", Clock: c.Clock}),
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    sc.enqueue,
		UpdateFunc: func(_, cur any) { sc.enqueue(cur) },
	}); err != nil {
		return nil, fmt.Errorf("csr informer: %w", err)
	}
	return sc, nil
}

// Run signs requests until ctx ends, and returns once its workers have
// stopped. The informers' owner starts them.
func (sc *Controller) Run(ctx context.Context) error {
	return controllers.Work(ctx, controllers.Workers[string]{
		Queue: sc.queue, Count: Workers, Synced: []cache.InformerSynced{sc.synced}, Sync: sc.sync, Log: sc.log,
		What: "csr", Failed: "sign certificate signing request",
	})
}

// enqueue queues the requests for SignerName that are not yet issued.
func (sc *Controller) enqueue(obj any) {
	c, ok := obj.(*certificatesv1.CertificateSigningRequest)
	if !ok || c.Spec.SignerName != SignerName || len(c.Status.Certificate) > 0 {
		return
	}
	sc.queue.Add(c.Name)
}

func (sc *Controller) sync(ctx context.Context, name string) error {
	cached, err := sc.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	s, err := plan(cached, sc.cfg.MaxLifetime)
	if err != nil || !s.sign && !s.fail {
		return err
	}
	c := cached.DeepCopy()
	if s.fail {
		c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue,
			Reason: FailureReason, Message: s.message, LastUpdateTime: metav1.NewTime(sc.clock.Now()),
		})
		sc.events.Event(c, corev1.EventTypeWarning, FailureReason, s.message)
		sc.log.Info("refusing to sign certificate signing request", "csr", name, "reason", s.message)
	} else {
		if c.Status.Certificate, err = sc.cfg.Signer.Sign(s.req, c.Spec.Usages, s.lifetime); err != nil {
			return fmt.Errorf("sign csr %q: %w", name, err)
		}
		sc.log.Info("signed certificate signing request", "csr", name, "user", c.Spec.Username, "lifetime", s.lifetime)
	}
	// A conflict means the cache was behind: the retry sees the update.
	_, err = sc.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
