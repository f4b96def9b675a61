// Package manager runs the hub's controllers and scheduler as
// kube-controller-manager and kube-scheduler run theirs: each under its
// own identity, on shared informers, only while this hub holds the
// leader Lease (kube-system/kube-controller-manager), so two hubs on one etcd
// never both act. It builds and runs; every decision is the controllers'.
// Only the hub's composition root imports it.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/outpost-mesh/outpost/hub/controllers"
)

// Runner is a built controller.
type Runner interface {
	// Run works until ctx ends and returns once all it started has
	// exited.
	Run(ctx context.Context) error
}

// Controller says how to build one controller.
type Controller struct {
	// Name names it in logs, such as "deployment".
	Name string
	// Identity is the user it acts as, as upstream's controllers act as
	// their service accounts (--use-service-account-credentials): the
	// manager gets its clients from Config.Clients. What it reads through
	// the shared informers is read as the manager (LeaseIdentity).
	Identity string
	// OwnInformers builds it with informers of its own, fed by its own
	// client, as upstream's kube-scheduler, a process of its own, has
	// its own: its caches may transform what they hold (the scheduler
	// trims the status of bound pods), which the informers the other
	// controllers share must not see.
	OwnInformers bool
	// New builds it from the Context of its identity; it starts nothing.
	New func(c controllers.Context) (Runner, error)
}

// Clients are the clients of one identity.
type Clients struct {
	Client     kubernetes.Interface // non-nil
	Metadata   metadata.Interface   // non-nil
	Dynamic    dynamic.Interface
	Extensions apiextensionsclient.Interface
}

// Config configures a Manager.
type Config struct {
	// Controllers are built and run, in this order, each time this hub
	// becomes the leader.
	Controllers []Controller
	// Clients returns the clients of identity; non-nil.
	Clients func(identity string) (Clients, error)
	// LeaseIdentity is the manager's own identity, as
	// kube-controller-manager's own credentials: its client takes the
	// leader Lease and feeds the informers all controllers share;
	// required.
	LeaseIdentity string
	// LeaseNamespace and LeaseName name the leader Lease.
	LeaseNamespace, LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod time the election as
	// kube-controller-manager's --leader-elect-* flags do.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Holder names this hub in the Lease; "" for the host name and a
	// random suffix.
	Holder string
	// Clock is the controllers' time; nil for the wall clock.
	Clock clock.WithTicker
	// Logger receives the manager's and the controllers' logs; non-nil.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults of upstream's leader election.
func DefaultConfig() Config {
	return Config{
		LeaseNamespace: "kube-system",
		LeaseName:      "kube-controller-manager", // the one upstream's role lets its user update
		LeaseDuration:  15 * time.Second,          // kube-controller-manager's defaults
		RenewDeadline:  10 * time.Second,
		RetryPeriod:    2 * time.Second,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Clients == nil:
		return errors.New("manager: nil Clients")
	case c.LeaseIdentity == "":
		return errors.New("manager: empty LeaseIdentity")
	case c.LeaseNamespace == "" || c.LeaseName == "":
		return errors.New("manager: the leader Lease has no name")
	case c.RetryPeriod <= 0 || c.RenewDeadline <= c.RetryPeriod || c.LeaseDuration <= c.RenewDeadline:
		return fmt.Errorf("manager: want 0 < retry period (%v) < renew deadline (%v) < lease duration (%v)", c.RetryPeriod, c.RenewDeadline, c.LeaseDuration)
	case c.Logger == nil:
		return errors.New("manager: nil Logger")
	}
	for _, ctl := range c.Controllers {
		if ctl.Name == "" || ctl.Identity == "" || ctl.New == nil {
			return fmt.Errorf("manager: controller %q needs a name, an identity and New", ctl.Name)
		}
	}
	return nil
}

// Manager runs controllers while it leads.
type Manager struct {
	cfg Config
}

// New checks cfg and returns a Manager; it starts nothing.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Holder == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "hub"
		}
		cfg.Holder = host + "_" + rand.String(8)
	}
	return &Manager{cfg: cfg}, nil
}

// Run campaigns for the leader Lease until ctx ends; while it holds the
// Lease it runs the controllers, and when it loses the Lease it stops
// them and campaigns again. On return it has released the Lease (if it
// held it) and every controller has returned. It returns an error only
// if the controllers cannot be built; a controller's error is logged and
// ends this term of leadership.
func (m *Manager) Run(ctx context.Context) error {
	log := m.cfg.Logger
	lc, err := m.cfg.Clients(m.cfg.LeaseIdentity)
	if err != nil {
		return fmt.Errorf("manager: clients of %s: %w", m.cfg.LeaseIdentity, err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: m.cfg.LeaseNamespace, Name: m.cfg.LeaseName},
		Client:     lc.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: m.cfg.Holder},
	}
	var buildErr error
	for ctx.Err() == nil && buildErr == nil {
		// One term of leadership: it ends when the Lease is lost, when
		// ctx ends, or when the controllers stop on their own, and the
		// controllers have all returned before the next term begins.
		term, endTerm := context.WithCancel(ctx)
		led := make(chan struct{})
		failed := false
		obs := &observedLock{Interface: lock, holder: m.cfg.Holder}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            obs,
			LeaseDuration:   m.cfg.LeaseDuration,
			RenewDeadline:   m.cfg.RenewDeadline,
			RetryPeriod:     m.cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            m.cfg.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					defer close(led)
					defer endTerm()
					log.Info("controllers: leading", "holder", m.cfg.Holder)
					if err := m.lead(lctx); err != nil {
						failed = true
						if errors.Is(err, errBuild) {
							buildErr = err
						}
						log.Error("controllers stopped", "err", err)
					}
				},
				OnStoppedLeading: func() {
					if ctx.Err() == nil {
						log.Warn("controllers: no longer leading; campaigning again", "holder", m.cfg.Holder)
					}
				},
				OnNewLeader: func(id string) {
					if id != m.cfg.Holder {
						log.Info("controllers: another hub leads", "leader", id)
					}
				},
			},
		})
		if err != nil {
			endTerm()
			return fmt.Errorf("manager: leader election: %w", err)
		}
		le.Run(term) // returns when the term ends
		endTerm()
		if obs.held.Load() {
			<-led // the elector started the controllers: wait for them
		}
		if failed && ctx.Err() == nil {
			// Not at once: a controller that fails on start would
			// otherwise take and drop the Lease in a hot loop.
			select {
			case <-ctx.Done():
			case <-m.cfg.Clock.After(m.cfg.LeaseDuration):
			}
		}
	}
	return buildErr
}

// observedLock is the leader Lease lock, noting whether this hub ever
// took it: the elector starts the controllers in a goroutine of its own
// once it has, and Run must wait for them before the next term.
type observedLock struct {
	resourcelock.Interface
	holder string
	held   atomic.Bool
}

func (l *observedLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, rec)
	if err == nil && rec.HolderIdentity == l.holder {
		l.held.Store(true)
	}
	return err
}

func (l *observedLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, rec)
	if err == nil && rec.HolderIdentity == l.holder {
		l.held.Store(true)
	}
	return err
}

var errBuild = errors.New("build controllers")

// lead builds and runs every controller until ctx ends or one fails.
func (m *Manager) lead(ctx context.Context) error {
	type identity struct {
		Clients
		broadcaster record.EventBroadcaster
	}
	own, err := m.cfg.Clients(m.cfg.LeaseIdentity)
	if err != nil {
		return fmt.Errorf("%w: clients of %s: %w", errBuild, m.cfg.LeaseIdentity, err)
	}
	factory := informers.NewSharedInformerFactory(own.Client, 0)
	factories := []informers.SharedInformerFactory{factory}
	ids := map[string]*identity{}
	defer func() {
		for _, id := range ids {
			id.broadcaster.Shutdown()
		}
	}()
	var runners []Runner
	for _, ctl := range m.cfg.Controllers {
		id := ids[ctl.Identity]
		if id == nil {
			cs, err := m.cfg.Clients(ctl.Identity)
			if err != nil {
				return fmt.Errorf("%w: clients of %s: %w", errBuild, ctl.Identity, err)
			}
			b := record.NewBroadcaster(record.WithContext(ctx))
			b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.Client.CoreV1().Events("")})
			id = &identity{Clients: cs, broadcaster: b}
			ids[ctl.Identity] = id
		}
		b := id.broadcaster
		f := factory
		if ctl.OwnInformers {
			f = informers.NewSharedInformerFactory(id.Client, 0)
			factories = append(factories, f)
		}
		r, err := ctl.New(controllers.Context{
			Client:     id.Client,
			Metadata:   id.Metadata,
			Dynamic:    id.Dynamic,
			Extensions: id.Extensions,
			Informers:  f,
			Events: func(component string) record.EventRecorder {
				return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
			},
			Clock:  m.cfg.Clock,
			Logger: m.cfg.Logger.With("controller", ctl.Name),
		})
		if err != nil {
			return fmt.Errorf("%w: %s: %w", errBuild, ctl.Name, err)
		}
		runners = append(runners, r)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, f := range factories {
		f.Start(gctx.Done())
	}
	for i, r := range runners {
		name := m.cfg.Controllers[i].Name
		g.Go(func() error {
			if err := r.Run(gctx); err != nil && gctx.Err() == nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	err = g.Wait()
	for _, f := range factories {
		f.Shutdown() // waits for the informers' goroutines
	}
	return err
}
