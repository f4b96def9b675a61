package hubd

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/outpost-mesh/outpost/hub/aggregator"
	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/pki"
)

// aggregated returns the handler of /apis: the service of a
// service-backed APIService's group version once the aggregator runs
// (h.remote), else api.
func (h *apiHandler) aggregated(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if remote := h.remote.Load(); remote != nil {
			remote.Proxy(api, proxyUser).ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// proxyUser is the user a request is served as (serveAs put it in its
// context), for the aggregated API servers.
func proxyUser(r *http.Request) (aggregator.User, bool) {
	u, ok := auth.UserFrom(r.Context())
	return aggregator.User{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}, ok
}

// remoteDiscovery lists the aggregated group versions in api's
// discovery.
type remoteDiscovery struct{ api *apiserver.Server }

var _ aggregator.DiscoverySink = remoteDiscovery{}

func (d remoteDiscovery) SetRemoteGroups(gvs []aggregator.DiscoveredGroupVersion) error {
	remote := make([]apiserver.RemoteGroupVersion, len(gvs))
	for i, gv := range gvs {
		remote[i] = apiserver.RemoteGroupVersion{
			GroupVersion:    schema.GroupVersion{Group: gv.Group, Version: gv.Version},
			VersionPriority: gv.VersionPriority,
			Resources:       gv.Resources,
		}
	}
	return d.api.SetRemoteGroups(remote)
}

func (d remoteDiscovery) SetGroupPriorities(p map[string]int32) error {
	return d.api.SetGroupPriorities(p)
}

// builtinGroupVersions returns the group versions api serves of itself,
// sorted, each once.
func builtinGroupVersions(api *apiserver.Server) []schema.GroupVersion {
	var gvs []schema.GroupVersion
	for _, k := range api.OpenAPIKinds() {
		if gv := k.GVK.GroupVersion(); !slices.Contains(gvs, gv) {
			gvs = append(gvs, gv)
		}
	}
	slices.SortFunc(gvs, func(a, b schema.GroupVersion) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Version, b.Version))
	})
	return gvs
}

// frontProxyTrust is what extension API servers authenticate the hub's
// clients and its front proxy by.
type frontProxyTrust struct {
	clusterCA []byte          // PEM
	front     *pki.FrontProxy // non-nil
}

// startAggregator runs the aggregation layer as a part of parts: the
// local APIServices of what api serves (built-in and custom resources),
// the availability of service-backed ones, reached through dialer, the
// proxy to them in handler, presenting trust's front-proxy certificate,
// and the extension-apiserver-authentication ConfigMap that says whom
// they trust. It acts as the hub (system:masters), as upstream's
// aggregator uses its loopback client.
func startAggregator(ctx context.Context, parts *parts, handler *apiHandler, api *apiserver.Server, dialer aggregator.ServiceDialer, trust frontProxyTrust, log *slog.Logger) (*part, error) {
	c, err := inprocAllClientsAs(handler, hubUser, "outpost-hub/aggregator", log)
	if err != nil {
		return nil, err
	}
	cfg, hc := inprocConfig(handler, "outpost-hub/aggregator", func(*http.Request) auth.User { return hubUser }, log)
	ac, err := aggregatorclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	alog := log.With("component", "aggregator")
	reg, err := aggregator.NewRegistrar(ac, c.Extensions, builtinGroupVersions(api), alog)
	if err != nil {
		return nil, err
	}
	remote, err := aggregator.NewRemote(ac, c.Client, aggregator.Config{
		Dialer: dialer, ClientCert: &trust.front.Client, Discovery: remoteDiscovery{api}, Logger: alog,
	})
	if err != nil {
		return nil, err
	}
	publisher, err := aggregator.NewTrustPublisher(c.Client,
		aggregator.HubTrust(trust.clusterCA, trust.front.CACertPEM, pki.FrontProxyClientName), alog)
	if err != nil {
		return nil, err
	}
	handler.remote.Store(remote)
	return parts.start("aggregator", context.WithoutCancel(ctx), func(ctx context.Context) error {
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		wg.Go(func() { errs <- reg.Run(ctx) })
		wg.Go(func() { errs <- remote.Run(ctx) })
		wg.Go(func() { errs <- publisher.Run(ctx) })
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}), nil
}
