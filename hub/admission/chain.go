package admission

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/outpost-mesh/outpost/hub/apiserver"
)

// Chain asks each of its plugins in turn, and refuses a write with the
// first refusal. It handles a resource when one of its plugins does.
type Chain []apiserver.Admission

var _ apiserver.Admission = Chain(nil)

func (c Chain) Handles(r schema.GroupResource) bool {
	for _, p := range c {
		if p.Handles(r) {
			return true
		}
	}
	return false
}

func (c Chain) Admit(ctx context.Context, a apiserver.AdmissionAttributes) error {
	for _, p := range c {
		if !p.Handles(a.Resource) {
			continue
		}
		if err := p.Admit(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// MutatingChain asks each of its plugins in turn, the next one seeing what
// the one before made of the object, and stops at the first refusal, as
// upstream runs its mutating admission plugins (the built-in ones, then
// the webhooks).
type MutatingChain []apiserver.MutatingAdmission

var _ apiserver.MutatingAdmission = MutatingChain(nil)

// Handles reports whether any plugin handles resource.
func (c MutatingChain) Handles(resource schema.GroupResource) bool {
	for _, p := range c {
		if p.Handles(resource) {
			return true
		}
	}
	return false
}

// Mutate asks every plugin that handles a.Resource.
func (c MutatingChain) Mutate(ctx context.Context, a *apiserver.AdmissionAttributes) error {
	for _, p := range c {
		if !p.Handles(a.Resource) {
			continue
		}
		if err := p.Mutate(ctx, a); err != nil {
			return err
		}
	}
	return nil
}
