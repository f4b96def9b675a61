package hubd

import (
	"context"
	"errors"
	"testing"

	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

func openTestStore(t *testing.T) store.Store {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestStoreKey(t *testing.T) {
	for _, key := range []string{
		"/registry/nodes/edge-1",
		"/registry/pods/default/web",
		"/registry/configmaps/kube-system/cfg",
		"/registry/secrets/default/s",
		"/registry/serviceaccounts/default/default",
		"/registry/services/default/api",
		"/registry/discovery.k8s.io/endpointslices/default/api-x1",
	} {
		k, ok := wireKey(key)
		if !ok {
			t.Fatalf("wireKey(%q) = false", key)
		}
		if got, ok := storeKey(k); !ok || got != key {
			t.Errorf("storeKey(wireKey(%q)) = %q, %v; want it back", key, got, ok)
		}
	}
	for _, k := range []wire.Key{
		{Resource: wire.ResourceEvents, Namespace: "default", Name: "e"},
		{Resource: wire.ResourceConfigMaps, Name: "no-namespace"},
		{Resource: wire.ResourceNodes, Namespace: "default", Name: "n"},
	} {
		if got, ok := storeKey(k); ok {
			t.Errorf("storeKey(%v) = %q, want none", k, got)
		}
	}
}

// TestSyncObjects: the sync server reads an object at the revision the
// views hold, through compactions, and learns that a version is gone once
// the object changed or went.
func TestSyncObjects(t *testing.T) {
	ctx := context.Background()
	st := openTestStore(t)
	objs := syncObjects{st}
	key := wire.Key{Resource: wire.ResourceConfigMaps, Namespace: "default", Name: "cfg"}
	v1, err := st.Create(ctx, "/registry/configmaps/default/cfg", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := st.Create(ctx, "/registry/configmaps/default/other", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Compact(ctx, other.ModRevision); err != nil {
		t.Fatal(err)
	}
	if got, err := objs.Object(ctx, key, v1.ModRevision); err != nil || string(got) != "one" {
		t.Errorf("Object(cfg@%d) after a compaction past it = %q, %v; want %q", v1.ModRevision, got, err, "one")
	}
	v2, err := st.Update(ctx, "/registry/configmaps/default/cfg", []byte("two"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := objs.Object(ctx, key, v1.ModRevision); !errors.Is(err, server.ErrObjectGone) {
		t.Errorf("Object(cfg@%d) after an update = %v, want ErrObjectGone", v1.ModRevision, err)
	}
	if got, err := objs.Object(ctx, key, v2.ModRevision); err != nil || string(got) != "two" {
		t.Errorf("Object(cfg@%d) = %q, %v; want %q", v2.ModRevision, got, err, "two")
	}
	if _, _, err := st.Delete(ctx, "/registry/configmaps/default/cfg", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := objs.Object(ctx, key, v2.ModRevision); !errors.Is(err, server.ErrObjectGone) {
		t.Errorf("Object(cfg@%d) after a delete = %v, want ErrObjectGone", v2.ModRevision, err)
	}
	if _, err := objs.Object(ctx, wire.Key{Resource: wire.ResourceEvents, Namespace: "default", Name: "e"}, 1); err == nil || errors.Is(err, server.ErrObjectGone) {
		t.Errorf("Object(an event) = %v, want an error", err)
	}
}
