package apiserver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/store"
)

// slotRules make config maps hold unique "slots": data["slots"] lists
// them, comma-separated; "auto" asks for the first free one of s1..s9.
type slotRules struct{ testRules }

var _ UpdateAllocator = slotRules{}

func slots(obj runtime.Object) []string {
	cm := obj.(*corev1.ConfigMap)
	if cm.Data["slots"] == "" {
		return nil
	}
	return strings.Split(cm.Data["slots"], ",")
}

func (slotRules) Held(obj runtime.Object) []string {
	var out []string
	for _, v := range slots(obj) {
		if v != "auto" {
			out = append(out, v)
		}
	}
	return out
}

func (r slotRules) Assign(obj runtime.Object, reserve func(string) (bool, error)) error {
	return r.AssignUpdate(obj, nil, reserve)
}

func (slotRules) AssignUpdate(obj, old runtime.Object, reserve func(string) (bool, error)) error {
	cm := obj.(*corev1.ConfigMap)
	vals := slots(obj)
	for i, v := range vals {
		if v == "auto" {
			for n := 1; n <= 9 && vals[i] == "auto"; n++ {
				ok, err := reserve(fmt.Sprintf("s%d", n))
				if err != nil {
					return err
				}
				if ok {
					vals[i] = fmt.Sprintf("s%d", n)
				}
			}
			continue
		}
		ok, err := reserve(v)
		if err != nil {
			return err
		}
		if !ok {
			return apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, cm.Name, field.ErrorList{
				field.Invalid(field.NewPath("data", "slots"), v, "provided slot is already allocated")})
		}
	}
	if len(vals) > 0 {
		cm.Data["slots"] = strings.Join(vals, ",")
	}
	return nil
}

// startSlotServer is startTestServer with slot-holding config maps and a
// namespace ns.
func startSlotServer(t *testing.T) *testHub {
	h := startTestServer(t, func(c *Config) {
		for i := range c.Resources {
			if c.Resources[i].Plural == "configmaps" {
				c.Resources[i].Rules = slotRules{}
			}
		}
	})
	if _, err := h.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return h
}

// reservationsIn returns the config maps' reservations: value -> owner.
func reservationsIn(t *testing.T, st store.Store) map[string]string {
	t.Helper()
	prefix := AllocationsPrefix + "configmaps/"
	res, err := st.List(context.Background(), prefix, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range res.KVs {
		out[strings.TrimPrefix(kv.Key, prefix)] = string(kv.Value)
	}
	return out
}

func slotMap(name string, slots string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"slots": slots}}
}

// TestAllocateOnCreateUpdateDelete: values are reserved on create (a taken
// one is a 422 that leaves nothing behind), gained and lost on update,
// and released on delete.
func TestAllocateOnCreateUpdateDelete(t *testing.T) {
	h := startSlotServer(t)
	ctx := context.Background()
	cms := h.client.CoreV1().ConfigMaps("ns")
	a, err := cms.Create(ctx, slotMap("a", "auto,x"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Data["slots"] != "s1,x" {
		t.Fatalf("created slots %q, want s1,x", a.Data["slots"])
	}
	if _, err := cms.Create(ctx, slotMap("b", "auto,x"), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("create with a taken slot = %v, want Invalid", err)
	}
	want := map[string]string{"s1": "/registry/configmaps/ns/a", "x": "/registry/configmaps/ns/a"}
	if got := reservationsIn(t, h.store); !maps.Equal(got, want) {
		t.Fatalf("after a refused create: reservations %v, want %v (the refused create's s2 released)", got, want)
	}

	// An update gains y and loses x; a dry run reserves nothing.
	a.Data["slots"] = "s1,y"
	if _, err := cms.Update(ctx, a, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if got := reservationsIn(t, h.store); !maps.Equal(got, want) {
		t.Fatalf("after a dry run: reservations %v, want %v", got, want)
	}
	a, err = cms.Update(ctx, a, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"s1": "/registry/configmaps/ns/a", "y": "/registry/configmaps/ns/a"}
	if got := reservationsIn(t, h.store); !maps.Equal(got, want) {
		t.Fatalf("after an update: reservations %v, want %v", got, want)
	}
	// x is free again; y is not.
	if _, err := cms.Create(ctx, slotMap("b", "x"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create with a released slot = %v", err)
	}
	a.Data["slots"] = "s1,y,x"
	if _, err := cms.Update(ctx, a, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("update to a taken slot = %v, want Invalid", err)
	}
	// An update that changes nothing reserves and releases nothing.
	a.Data["slots"] = "s1,y"
	if _, err := cms.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"x": "/registry/configmaps/ns/b"}
	if got := reservationsIn(t, h.store); !maps.Equal(got, want) {
		t.Fatalf("after a delete: reservations %v, want %v", got, want)
	}
}

// TestRepairAllocations: repair re-creates the reservations stored
// objects lack, gives a value back to the object that holds it, and
// releases reservations nobody holds, as a crash between the steps of a
// create, an update or a delete leaves them.
func TestRepairAllocations(t *testing.T) {
	h := startSlotServer(t)
	ctx := context.Background()
	cms := h.client.CoreV1().ConfigMaps("ns")
	for name, s := range map[string]string{"a": "a1,a2", "b": "b1", "c": "c1"} {
		if _, err := cms.Create(ctx, slotMap(name, s), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := reservationsIn(t, h.store)
	if len(want) != 4 {
		t.Fatalf("reservations %v, want 4", want)
	}
	// Crashes: a1's reservation lost (a store restored from an older
	// backup), b1 named for another owner, a create that reserved z and
	// died, and a delete of d that died before releasing d1.
	key := func(v string) string { return AllocationsPrefix + "configmaps/" + v }
	if _, _, err := h.store.Delete(ctx, key("a1"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.Update(ctx, key("b1"), []byte("/registry/configmaps/ns/gone"), 0); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"z", "d1"} {
		if _, err := h.store.Create(ctx, key(v), []byte("/registry/configmaps/ns/"+v)); err != nil {
			t.Fatal(err)
		}
	}
	// Before repair, the lost a1 could be handed out twice.
	if err := h.srv.RepairAllocations(ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := reservationsIn(t, h.store); !maps.Equal(got, want) {
		t.Fatalf("after repair: reservations %v, want %v", got, want)
	}
	if _, err := cms.Create(ctx, slotMap("e", "a1"), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("create with a repaired slot = %v, want Invalid", err)
	}
	if _, err := cms.Create(ctx, slotMap("e", "z,d1"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create with released slots = %v", err)
	}
	// On a shared store a leak is kept: it may be a create in flight.
	if _, err := h.store.Create(ctx, key("y"), []byte("/registry/configmaps/ns/y")); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.RepairAllocations(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := reservationsIn(t, h.store)["y"]; !ok {
		t.Fatal("repair without releasing leaks released one")
	}
	if err := h.srv.RepairAllocations(ctx, true); err != nil {
		t.Fatal(err)
	}
	// Repair of a consistent store changes nothing.
	before := reservationsIn(t, h.store)
	rev, _ := h.store.Revision(ctx)
	if err := h.srv.RepairAllocations(ctx, true); err != nil {
		t.Fatal(err)
	}
	if after, _ := h.store.Revision(ctx); after != rev || !maps.Equal(reservationsIn(t, h.store), before) {
		t.Fatalf("repair of a consistent store wrote (revision %d -> %d)", rev, after)
	}
}

// TestRepairAllocationsPages: repair reads objects and reservations a
// page at a time, and sees all of them.
func TestRepairAllocationsPages(t *testing.T) {
	h := startSlotServer(t)
	ctx := context.Background()
	n := repairPage + 20
	var want []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("cm%04d", i)
		v := fmt.Sprintf("v%04d", i)
		if _, err := cms(h).Create(ctx, slotMap(name, v), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, _, err := h.store.Delete(ctx, AllocationsPrefix+"configmaps/"+v, 0); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, v)
		if _, err := h.store.Create(ctx, AllocationsPrefix+"configmaps/leak"+v, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.srv.RepairAllocations(ctx, true); err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(reservationsIn(t, h.store)))
	if !slices.Equal(got, want) {
		t.Fatalf("after repair: %d reservations, want %d", len(got), len(want))
	}
}

func cms(h *testHub) interface {
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
} {
	return h.client.CoreV1().ConfigMaps("ns")
}
