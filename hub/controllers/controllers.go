// Package controllers holds what the hub's controllers share: the Context
// each is built from and the conventions they follow. Each controller lives
// in a package of its own under hub/controllers (nodelifecycle, deployment,
// replicaset, ...) as a pure decision core plus a thin client-go shell, and
// reaches the API only through Context.Client and Context.Informers, as any
// other client would, so that it can run in another process later.
//
// A controller package exports
//
//	func New(c controllers.Context) (*Controller, error)
//	func (*Controller) Run(ctx context.Context) error
//
// New registers the informers and handlers it needs and starts nothing.
// Run waits for the caches it uses to sync, works until ctx ends, and
// returns only once every goroutine it started has exited. Work is driven
// by rate-limited work queues (client-go's workqueue, with Context.Clock):
// a key that fails is retried with back-off, never in a hot loop. A
// controller that meets an object it cannot act on records a Warning event
// and a condition on it and goes on with the rest.
package controllers

import (
	"errors"
	"log/slog"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// Context is what a controller is built from. The controller manager
// makes one for all controllers; tests make their own.
type Context struct {
	// Client talks to the API as the controller manager
	// (system:kube-controller-manager); non-nil.
	Client kubernetes.Interface
	// Metadata reads and watches any resource's object metadata only
	// (the garbage collector and the namespace controller); non-nil.
	Metadata metadata.Interface
	// Dynamic reads and writes any resource, custom resources included,
	// and Extensions the CustomResourceDefinitions; nil for controllers
	// built without them (only the CRD controller needs them).
	Dynamic    dynamic.Interface
	Extensions apiextensionsclient.Interface
	// Informers are shared by all controllers; non-nil. Its owner starts
	// it once every controller has been built (New registers what each
	// needs), and stops it after they have all returned.
	Informers informers.SharedInformerFactory
	// Events returns the recorder of Events for component (such as
	// "deployment-controller"), as upstream's controllers report in
	// `kubectl describe`; non-nil.
	Events func(component string) record.EventRecorder
	// Clock is the controllers' time; clock.RealClock{} in the hub, a
	// fake clock (k8s.io/utils/clock/testing) in tests. Non-nil.
	Clock clock.WithTicker
	// Logger receives the controller's logs, which the manager labels
	// with the controller's name (controller=NAME); non-nil.
	Logger *slog.Logger
}

// Validate reports the first field of c that is missing.
func (c Context) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("controllers: nil Client")
	case c.Metadata == nil:
		return errors.New("controllers: nil Metadata")
	case c.Informers == nil:
		return errors.New("controllers: nil Informers")
	case c.Events == nil:
		return errors.New("controllers: nil Events")
	case c.Clock == nil:
		return errors.New("controllers: nil Clock")
	case c.Logger == nil:
		return errors.New("controllers: nil Logger")
	}
	return nil
}
