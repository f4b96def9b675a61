package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/hubd"
	"github.com/outpost-mesh/outpost/hub/store"
	"github.com/outpost-mesh/outpost/hub/store/badgerstore"
)

// TestServiceAllocationsSurviveKill creates, converts and deletes
// services from several clients at once, kills the hub with SIGKILL in
// the middle, restarts it on the same data directory, and does it again a
// few times: no two services may then share a cluster IP or a node port,
// new services still get free ones, and every reservation the store holds
// belongs to the service holding its value (the repair at start released
// what the crashes left behind).
func TestServiceAllocationsSurviveKill(t *testing.T) {
	skipShort(t)
	t.Parallel()
	f := newFleet(t)
	h := f.startHub()
	const (
		rounds  = 4
		clients = 4
		// perRound is how many services each round creates before the
		// kill, at least.
		perRound = 30
	)
	var seq atomic.Int64
	for round := 1; round <= rounds; round++ {
		cs := h.cs
		ctx, cancel := context.WithCancel(context.Background())
		var created atomic.Int64
		var wg sync.WaitGroup
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				churn(ctx, cs, &seq, &created)
			}()
		}
		f.eventually(time.Minute, fmt.Sprintf("round %d: %d services created", round, perRound), func() (bool, string) {
			n := created.Load()
			return n >= perRound, fmt.Sprint(n, " created")
		})
		h.kill()
		cancel()
		wg.Wait()
		h.start()
		if p := allocationProblem(t, h.cs); p != "" {
			t.Fatalf("after crash %d: %s", round, p)
		}
	}
	// The ranges are still usable: new services get free values.
	cs := h.cs
	for i := 0; i < 10; i++ {
		if _, err := cs.CoreV1().Services("default").Create(context.Background(), nodePortService(fmt.Sprintf("after-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create after the crashes: %v", err)
		}
	}
	if p := allocationProblem(t, cs); p != "" {
		t.Fatal(p)
	}
	held := heldValues(t, cs)
	h.stop()
	checkReservations(t, filepath.Join(h.dataDir, hubd.StoreDir), held)
}

// servicePorts is how many ports each service has: each takes a node
// port, reserved one after the other, so that a kill often falls between
// a service's first reservation and its write, or between its deletion
// and its last release.
const servicePorts = 16

func nodePortService(name string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{
		Type:     corev1.ServiceTypeNodePort,
		Selector: map[string]string{"app": name},
	}}
	for i := 0; i < servicePorts; i++ {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(8000 + i)})
	}
	return s
}

// churn creates NodePort services until ctx ends, turning every third
// into a ClusterIP service (releasing its node ports) and deleting every
// fourth, counting the creates that succeeded. Errors are expected once
// the hub is killed; churn goes on until ctx ends.
func churn(ctx context.Context, cs kubernetes.Interface, seq, created *atomic.Int64) {
	svcs := cs.CoreV1().Services("default")
	for ctx.Err() == nil {
		n := seq.Add(1)
		name := fmt.Sprintf("svc-%d", n)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := svcs.Create(rctx, nodePortService(name), metav1.CreateOptions{})
		if err == nil {
			created.Add(1)
			switch {
			case n%4 == 0:
				svcs.Delete(rctx, name, metav1.DeleteOptions{})
			case n%3 == 0:
				s.Spec.Type = corev1.ServiceTypeClusterIP
				for i := range s.Spec.Ports {
					s.Spec.Ports[i].NodePort = 0
				}
				svcs.Update(rctx, s, metav1.UpdateOptions{})
			}
		}
		cancel()
	}
}

// heldValues returns what the services hold, as reservations name them:
// cluster IPs as themselves, node ports as "nodeport/N", each with the
// store key of its service.
func heldValues(t *testing.T, cs kubernetes.Interface) map[string]string {
	t.Helper()
	l, err := cs.CoreV1().Services("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := apiserver.KeyPrefix(schema.GroupResource{Resource: "services"})
	held := map[string]string{}
	for _, s := range l.Items {
		key := prefix + s.Namespace + "/" + s.Name
		for _, ip := range s.Spec.ClusterIPs {
			if ip != corev1.ClusterIPNone {
				held[ip] = key
			}
		}
		for _, p := range s.Spec.Ports {
			if p.NodePort != 0 {
				held["nodeport/"+strconv.Itoa(int(p.NodePort))] = key
			}
		}
	}
	return held
}

// allocationProblem lists the services and describes the first value two
// of them share, or returns "".
func allocationProblem(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	l, err := cs.CoreV1().Services("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ips, ports := map[string]string{}, map[int32]string{}
	for _, s := range l.Items {
		for _, ip := range s.Spec.ClusterIPs {
			if ip == corev1.ClusterIPNone {
				continue
			}
			if other, dup := ips[ip]; dup {
				return fmt.Sprintf("services %s and %s share cluster IP %s", other, s.Name, ip)
			}
			ips[ip] = s.Name
		}
		seen := map[int32]bool{}
		for _, p := range s.Spec.Ports {
			if p.NodePort == 0 || seen[p.NodePort] {
				continue
			}
			seen[p.NodePort] = true
			if other, dup := ports[p.NodePort]; dup {
				return fmt.Sprintf("services %s and %s share node port %d", other, s.Name, p.NodePort)
			}
			ports[p.NodePort] = s.Name
		}
	}
	return ""
}

// checkReservations opens the stopped hub's store and checks that its
// service reservations are exactly the values held, each owned by the
// service holding it.
func checkReservations(t *testing.T, dir string, held map[string]string) {
	t.Helper()
	st, err := badgerstore.Open(badgerstore.DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	prefix := apiserver.AllocationsPrefix + "services/"
	res, err := st.List(context.Background(), prefix, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	seen := map[string]bool{}
	for _, kv := range res.KVs {
		v := strings.TrimPrefix(kv.Key, prefix)
		seen[v] = true
		switch owner, ok := held[v]; {
		case !ok:
			problems = append(problems, fmt.Sprintf("reservation %s (owner %s): no service holds it", v, kv.Value))
		case owner != string(kv.Value):
			problems = append(problems, fmt.Sprintf("reservation %s names %s, held by %s", v, kv.Value, owner))
		}
	}
	for v, owner := range held {
		if !seen[v] {
			problems = append(problems, fmt.Sprintf("%s held by %s has no reservation", v, owner))
		}
	}
	if len(problems) > 0 {
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("... %d more", len(problems)-20))
		}
		t.Fatalf("%d reservations, %d values held:\n%s", len(res.KVs), len(held), strings.Join(problems, "\n"))
	}
	t.Logf("%d reservations, each owned by the service holding it", len(res.KVs))
}
