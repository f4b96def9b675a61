package hubd

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers/endpointslice"
)

// apiEndpointsEvery is how often the `kubernetes` service's endpoints are
// checked, as kube-apiserver's endpoint reconciler does.
const apiEndpointsEvery = 10 * time.Second

// advertiseAddr returns the address pods should reach the API at: the
// host of apiAddr when it names one, else this host's first global
// unicast address (IPv4 first), as kube-apiserver picks its
// --advertise-address. ok is false when there is none but loopback,
// which an Endpoints may not hold.
func advertiseAddr(apiAddr string, ifaceAddrs func() ([]net.Addr, error)) (netip.Addr, bool) {
	if host, _, err := net.SplitHostPort(apiAddr); err == nil {
		if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
			return ip.Unmap(), !ip.IsLoopback()
		}
	}
	addrs, err := ifaceAddrs()
	if err != nil {
		return netip.Addr{}, false
	}
	var v6 netip.Addr
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil || !p.Addr().IsGlobalUnicast() {
			continue
		}
		if ip := p.Addr().Unmap(); ip.Is4() {
			return ip, true
		} else if !v6.IsValid() {
			v6 = ip
		}
	}
	return v6, v6.IsValid()
}

// keepAPIEndpoints keeps the `kubernetes` service's Endpoints and
// EndpointSlice pointing at ip:port until ctx ends.
func keepAPIEndpoints(ctx context.Context, handler *apiHandler, ip netip.Addr, port int32, log *slog.Logger) error {
	client, err := inprocClient(handler, log)
	if err != nil {
		return err
	}
	ctx = auth.WithUser(ctx, hubUser)
	t := time.NewTicker(apiEndpointsEvery)
	defer t.Stop()
	failing := false
	for {
		err := endpointslice.ReconcileAPIEndpoints(ctx, client, ip, port)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			log.Warn("kubernetes service endpoints not written; retrying", "address", ip, "port", port, "err", err)
			failing = true
		case err == nil && failing:
			log.Info("kubernetes service endpoints written", "address", ip, "port", port)
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
