package hubd

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	"k8s.io/client-go/tools/cache"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/apiextensions"
)

// customResources serves the custom resources of the
// CustomResourceDefinitions there are: a definition's versions are
// served once its names are accepted (the CRD controller decides that),
// served anew when its spec or accepted names change, and no longer
// served once the definition is gone (its objects were deleted through
// them first). Discovery follows at once.
type customResources struct {
	api *apiserver.Server
	log *slog.Logger

	mu sync.Mutex
	// served holds what each definition was last served from, so that
	// a change of its status alone (conditions) does not replace its
	// resources, which would end their watches.
	served map[string]servedCRD
}

// servedCRD is what a definition's resources are built from.
type servedCRD struct {
	generation int64
	names      apiextensionsv1.CustomResourceDefinitionNames
}

// startCustomResources serves the definitions there are, then follows
// their changes as a part of parts; it returns once what is stored is
// served (or fails after rbacSyncTimeout), before the hub serves anyone
// but system:masters, so that a restarted hub answers for its custom
// resources from its first request.
func startCustomResources(ctx context.Context, parts *parts, handler *apiHandler, api *apiserver.Server, log *slog.Logger) (*part, error) {
	c, err := inprocAllClientsAs(handler, hubUser, "outpost-hub/customresources", log)
	if err != nil {
		return nil, err
	}
	cr := &customResources{api: api, log: log.With("component", "customresources"), served: map[string]servedCRD{}}
	f := apiextensionsinformers.NewSharedInformerFactory(c.Extensions, 0)
	inf := f.Apiextensions().V1().CustomResourceDefinitions().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    cr.sync,
		UpdateFunc: func(_, obj any) { cr.sync(obj) },
		DeleteFunc: cr.remove,
	}); err != nil {
		return nil, err
	}
	p := parts.start("custom resources", context.WithoutCancel(ctx), func(ctx context.Context) error {
		f.Start(ctx.Done())
		<-ctx.Done()
		f.Shutdown()
		return nil
	})
	wait, cancel := context.WithTimeout(ctx, rbacSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(wait.Done(), inf.HasSynced) {
		return p, fmt.Errorf("custom resource definitions did not sync within %v", rbacSyncTimeout)
	}
	return p, nil
}

// namesAccepted reports whether crd's NamesAccepted condition is true.
func namesAccepted(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.NamesAccepted {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// sync serves obj's resources when its names are accepted and what they
// are built from changed.
func (c *customResources) sync(obj any) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok || !namesAccepted(crd) {
		return
	}
	want := servedCRD{generation: crd.Generation, names: crd.Status.AcceptedNames}
	c.mu.Lock()
	defer c.mu.Unlock()
	if have, ok := c.served[crd.Name]; ok && reflect.DeepEqual(have, want) {
		return
	}
	rs, err := apiextensions.CustomResources(crd)
	if err == nil {
		err = c.api.SetResources(crd.Name, rs)
	}
	if err != nil {
		c.log.Warn("custom resources not served", "crd", crd.Name, "err", err)
		return
	}
	c.served[crd.Name] = want
	c.log.Info("custom resources served", "crd", crd.Name, "generation", crd.Generation)
}

// remove stops serving the resources of a definition that is gone.
func (c *customResources) remove(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.api.SetResources(crd.Name, nil); err != nil {
		c.log.Warn("custom resources not removed", "crd", crd.Name, "err", err)
		return
	}
	delete(c.served, crd.Name)
	c.log.Info("custom resources no longer served", "crd", crd.Name)
}
