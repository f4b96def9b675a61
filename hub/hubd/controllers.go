package hubd

import (
	"fmt"
	"log/slog"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/hub/controllers/manager"
)

// newControllerManager returns the manager of the hub's controllers and
// scheduler, each acting through the in-process API as its own identity.
func newControllerManager(handler *apiHandler, log *slog.Logger) (*manager.Manager, error) {
	users := map[string]auth.User{
		auth.ControllerManagerUser: controllerManagerUser,
		auth.SchedulerUser:         schedulerUser,
	}
	cfg := manager.DefaultConfig()
	cfg.LeaseIdentity = auth.ControllerManagerUser
	cfg.Controllers = controllerList()
	cfg.Clients = func(identity string) (manager.Clients, error) {
		u, ok := users[identity]
		if !ok {
			return manager.Clients{}, fmt.Errorf("no in-process identity %q", identity)
		}
		cs, md, err := inprocClientsAs(handler, u, identity, log)
		if err != nil {
			return manager.Clients{}, err
		}
		return manager.Clients{Client: cs, Metadata: md}, nil
	}
	cfg.Logger = log.With("component", "controllers")
	m, err := manager.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	return m, nil
}

// controllerList returns the controllers the hub runs, in the order they
// are built.
func controllerList() []manager.Controller {
	return nil
}
