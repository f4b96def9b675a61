package hubd

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sync"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclientv1 "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/apiserver/openapi"
	"github.com/outpost-mesh/outpost/hub/registry/apiextensions"
	"github.com/outpost-mesh/outpost/hub/webhookclient"
)

// customResources serves the custom resources of the
// CustomResourceDefinitions there are: a definition's versions are
// served once its names are accepted (the CRD controller decides that),
// served anew when its spec or accepted names change, and no longer
// served once the definition is gone (its objects were deleted through
// them first). Discovery follows at once.
type customResources struct {
	api *apiserver.Server
	// dial reaches the Services of conversion webhooks.
	dial webhookclient.DialService
	// crds writes the definitions' Established condition.
	crds apiextensionsclientv1.CustomResourceDefinitionInterface
	docs *openapiDocs
	// static are the kinds of the built-in resources, which the OpenAPI
	// documents always describe.
	static []openapi.Kind
	log    *slog.Logger

	mu sync.Mutex
	// served holds what each definition was last served from, so that
	// a change of its status alone (conditions) does not replace its
	// resources, which would end their watches.
	served map[string]servedCRD
	// kinds are each served definition's kinds in the OpenAPI documents.
	kinds map[string][]openapi.Kind
}

// servedCRD is what a definition's resources are built from: its spec
// (not its generation, which its deletion bumps too) and accepted names.
type servedCRD struct {
	spec  apiextensionsv1.CustomResourceDefinitionSpec
	names apiextensionsv1.CustomResourceDefinitionNames
}

// startCustomResources serves the definitions there are, then follows
// their changes as a part of parts; it returns once what is stored is
// served (or fails after rbacSyncTimeout), before the hub serves anyone
// but system:masters, so that a restarted hub answers for its custom
// resources from its first request.
func startCustomResources(ctx context.Context, parts *parts, handler *apiHandler, api *apiserver.Server, docs *openapiDocs, dial serviceDialer, log *slog.Logger) (*part, error) {
	c, err := inprocAllClientsAs(handler, hubUser, "outpost-hub/customresources", log)
	if err != nil {
		return nil, err
	}
	cr := &customResources{api: api, dial: dial.DialService, crds: c.Extensions.ApiextensionsV1().CustomResourceDefinitions(), docs: docs, static: api.OpenAPIKinds(), log: log.With("component", "customresources"),
		served: map[string]servedCRD{}, kinds: map[string][]openapi.Kind{}}
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
	want := servedCRD{spec: crd.Spec, names: crd.Status.AcceptedNames}
	c.mu.Lock()
	defer c.mu.Unlock()
	if have, ok := c.served[crd.Name]; ok && reflect.DeepEqual(have, want) {
		c.establish(crd) // served already; a failed write is tried again
		return
	}
	rs, err := apiextensions.CustomResources(crd, c.dial)
	if err == nil {
		err = c.api.SetResources(crd.Name, rs)
	}
	if err != nil {
		c.log.Warn("custom resources not served", "crd", crd.Name, "err", err)
		return
	}
	c.served[crd.Name] = want
	c.log.Info("custom resources served", "crd", crd.Name, "generation", crd.Generation)
	// Established says the resources are served; the OpenAPI documents,
	// rebuilt whole, follow.
	c.establish(crd)
	c.kinds[crd.Name] = openAPIKinds(crd)
	c.rebuildOpenAPI()
}

// establish sets crd's Established condition True once its resources are
// served, as upstream's establishing controller does once its handler
// serves them, so that a client that waits for Established (Helm, before
// it applies the CRD's objects) finds them in discovery.
func (c *customResources) establish(crd *apiextensionsv1.CustomResourceDefinition) {
	if apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
		return
	}
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil || apiextensionshelpers.IsCRDConditionTrue(cur, apiextensionsv1.Established) {
			return err
		}
		apiextensionshelpers.SetCRDCondition(cur, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue,
			Reason: "InitialNamesAccepted", Message: "the initial names have been accepted",
		})
		_, err = c.crds.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		c.log.Warn("custom resource definition not marked established", "crd", crd.Name, "err", err)
	}
}

// rebuildOpenAPI makes the OpenAPI documents describe the built-in kinds
// and those of every served definition. The caller holds mu.
func (c *customResources) rebuildOpenAPI() {
	kinds := slices.Clone(c.static)
	for _, name := range slices.Sorted(maps.Keys(c.kinds)) {
		kinds = append(kinds, c.kinds[name]...)
	}
	if err := c.docs.rebuild(kinds); err != nil {
		c.log.Warn("openapi documents not rebuilt", "err", err)
	}
}

// openAPIKinds returns the kinds of crd's served versions for the OpenAPI
// documents, each described by its version's schema (one that keeps
// every field when it has none).
func openAPIKinds(crd *apiextensionsv1.CustomResourceDefinition) []openapi.Kind {
	var kinds []openapi.Kind
	names := crd.Status.AcceptedNames
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		described := map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
		if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			if b, err := json.Marshal(v.Schema.OpenAPIV3Schema); err == nil {
				var m map[string]any
				if json.Unmarshal(b, &m) == nil {
					described = m
				}
			}
		}
		k := openapi.Kind{
			GVK:    schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: names.Kind},
			Plural: names.Plural, Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped, Schema: described,
		}
		if v.Subresources != nil && v.Subresources.Status != nil {
			k.Subresources = append(k.Subresources, "status")
		}
		if v.Subresources != nil && v.Subresources.Scale != nil {
			k.Subresources = append(k.Subresources, "scale")
		}
		kinds = append(kinds, k)
	}
	return kinds
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
	delete(c.kinds, crd.Name)
	c.rebuildOpenAPI()
	c.log.Info("custom resources no longer served", "crd", crd.Name)
}
