package hubd

import (
	"context"
	"log/slog"

	"github.com/outpost-mesh/outpost/hub/registry/firmware"
)

// installFirmwareCRDs installs (or brings up to date) the definitions of
// the firmware API, Releases and Rollouts, through the hub's own API as
// the hub; the CRD controller then names and establishes them and the
// custom resources part serves them.
func installFirmwareCRDs(ctx context.Context, handler *apiHandler, log *slog.Logger) error {
	c, err := inprocAllClientsAs(handler, hubUser, "outpost-hub/firmware", log)
	if err != nil {
		return err
	}
	return firmware.Install(ctx, c.Extensions.ApiextensionsV1().CustomResourceDefinitions())
}
