package agent_test

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/runtime/fake"
	"github.com/outpost-mesh/outpost/internal/testlog"
	"github.com/outpost-mesh/outpost/internal/wait"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// damage overwrites, in the badger database of an agent's checkpoint, the
// value of every key that match selects with what garble makes of it, as
// a flipped bit on the gateway's flash would. It returns how many it
// damaged.
func damage(t *testing.T, dir string, match func(key, value []byte) bool, garble func([]byte) []byte) int {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(dir, agent.CheckpointDir)).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	err = db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		var keys, values [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				it.Close()
				return err
			}
			if match(it.Item().Key(), v) {
				keys, values = append(keys, it.Item().KeyCopy(nil)), append(values, v)
			}
		}
		it.Close()
		for i := range keys {
			if err := txn.Set(keys[i], garble(values[i])); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDamagedCheckpoint: a checkpoint whose pod record (and revision, for
// Open to refuse it) no longer decodes does not stop the agent, nor any
// pod: the damaged records are dropped, by Repair at start or when a read
// meets them, and the pod the view lost keeps running while the view is
// incomplete (revision 0, until the hub resends it). Once the view is
// complete again without that pod, the pod is stopped.
func TestDamagedCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		revision bool   // damage the revision too
		log      string // what the agent says of it
	}{
		{"revision and pod", true, "checkpoint repaired"},
		{"pod only", false, "checkpoint damaged: dropped the records that do not decode; the hub will send them again"},
	} {
		t.Run(tc.name, func(t *testing.T) { testDamagedCheckpoint(t, tc.revision, tc.log) })
	}
}

func testDamagedCheckpoint(t *testing.T, revision bool, wantLog string) {
	dir := t.TempDir()
	writeIdentity(t, dir)
	mk := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec:       corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "main", Image: "nginx:1.27"}}},
		}
	}
	cp := openCheckpoint(t, dir)
	if err := cp.ApplyBatch([]wire.Change{
		{Op: wire.OpPut, Key: podKey("kept"), Revision: 5, Object: encode(t, mk("kept"))},
		{Op: wire.OpPut, Key: podKey("lost"), Revision: 6, Object: encode(t, mk("lost"))},
	}, 7); err != nil {
		t.Fatal(err)
	}
	cp.Close()

	rt := fake.New(fake.Config{})
	stop := run(t, newAgentConfig(t, dir, rt))
	wait.For(t, waitLong, "both pods running", running(t, rt, "kept", "lost"))
	stop()
	before := rt.Stats()
	ids := map[string]string{}
	for _, name := range []string{"kept", "lost"} {
		ids[name] = runtimePod(t, rt, name).Container("main").ID
	}

	// The checkpoint's layout, as its own tests know it: the revision is
	// "m/rev", and objects' keys start with 'o'.
	flip := func(v []byte) []byte { v[len(v)/2] ^= 0x20; return v }
	if n := damage(t, dir, func(k, _ []byte) bool { return revision && string(k) == "m/rev" }, func([]byte) []byte { return []byte{1, 2, 3} }); revision && n != 1 {
		t.Fatalf("damaged %d revision records, want 1", n)
	}
	if n := damage(t, dir, func(k, v []byte) bool { return k[0] == 'o' && bytes.Contains(v, []byte("uid-lost")) }, flip); n != 1 {
		t.Fatalf("damaged %d pod records, want 1", n)
	}

	ta := newAgentConfig(t, dir, rt)
	logs := testlog.NewRecorder(t, slog.LevelInfo)
	ta.cfg.Logger = slog.New(logs)
	stop = run(t, ta)
	ta.afterRounds(t, 20)
	if got := logs.Count(wantLog); got != 1 {
		t.Errorf("%d logs %q, want 1", got, wantLog)
	}
	if after := rt.Stats(); after != before {
		t.Errorf("runtime calls with a damaged checkpoint: %+v, before %+v; want none", after, before)
	}
	for name, id := range ids {
		if p := runtimePod(t, rt, name); p == nil || p.Container("main").ID != id {
			t.Errorf("pod %s after the damage: %+v, want container %s still there", name, p, id)
		}
	}
	stop()

	cp = openCheckpoint(t, dir)
	if rev := cp.LastRevision(); rev != 0 {
		t.Errorf("LastRevision() after the repair = %d, want 0: a resume from the inventory is due", rev)
	}
	if _, ok, err := cp.Get(podKey("kept")); !ok || err != nil {
		t.Errorf("Get(kept) after the repair = %v, %v, want it kept", ok, err)
	}
	if _, ok, err := cp.Get(podKey("lost")); ok || err != nil {
		t.Errorf("Get(lost) after the repair = %v, %v, want it dropped", ok, err)
	}
	// The hub's resume says the view is complete, and lost is not in it.
	if err := cp.ApplyBatch(nil, 9); err != nil {
		t.Fatal(err)
	}
	cp.Close()
	stop = run(t, newAgentConfig(t, dir, rt))
	wait.For(t, waitLong, "lost removed", func() (bool, string) {
		p := runtimePod(t, rt, "lost")
		return p == nil, "lost still in the runtime"
	})
	if p := runtimePod(t, rt, "kept"); p == nil || p.Container("main").ID != ids["kept"] {
		t.Errorf("kept after the view completed: %+v, want container %s still there", p, ids["kept"])
	}
	stop()
}
