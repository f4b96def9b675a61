package daemonset

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// expectTTL is how long the controller waits for its cache to show the
// pods it created and deleted before it acts on the cache regardless, as
// upstream's expectations time out.
const expectTTL = 5 * time.Minute

// expectations remember, per daemonset, the pods the controller created
// and deleted until its pod cache shows them, so that a sync on a stale
// cache does not create a second pod for a node or delete a pod twice.
// Its methods are safe for concurrent use.
type expectations struct {
	mu sync.Mutex
	m  map[string]*pending
}

type pending struct {
	created map[types.NamespacedName]bool
	deleted map[types.NamespacedName]types.UID
	since   time.Time
}

func newExpectations() *expectations { return &expectations{m: make(map[string]*pending)} }

func (e *expectations) entry(key string, now time.Time) *pending {
	p := e.m[key]
	if p == nil {
		p = &pending{created: map[types.NamespacedName]bool{}, deleted: map[types.NamespacedName]types.UID{}}
		e.m[key] = p
	}
	p.since = now
	return p
}

// created records that the controller of key created pod.
func (e *expectations) created(key string, pod *corev1.Pod, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key, now).created[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = true
}

// deleted records that the controller of key deleted pod.
func (e *expectations) deleted(key string, pod *corev1.Pod, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.entry(key, now).deleted[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}] = pod.UID
}

// forget drops what is expected for key.
func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// satisfied reports whether pods (the cache) shows everything expected
// for key, or the expectations have expired at now.
func (e *expectations) satisfied(key string, pods corelisters.PodLister, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.m[key]
	if p == nil {
		return true
	}
	for n := range p.created {
		if _, err := pods.Pods(n.Namespace).Get(n.Name); err == nil || !apierrors.IsNotFound(err) {
			delete(p.created, n)
		}
	}
	for n, uid := range p.deleted {
		pod, err := pods.Pods(n.Namespace).Get(n.Name)
		if err != nil || pod.UID != uid || pod.DeletionTimestamp != nil {
			delete(p.deleted, n)
		}
	}
	if len(p.created)+len(p.deleted) == 0 || now.Sub(p.since) > expectTTL {
		delete(e.m, key)
		return true
	}
	return false
}

// gone records that the cache saw pod deleted, which settles both a
// creation of it not yet seen and its deletion.
func (e *expectations) gone(key string, pod *corev1.Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.m[key]; p != nil {
		n := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		delete(p.created, n)
		delete(p.deleted, n)
	}
}
