package containerd

import (
	"maps"
	"sync"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fullListEvery is how long List goes on the tasks kept from containerd's
// events before it lists them all again, in case the events and the
// tasks ever disagree.
const fullListEvery = 30 * time.Second

// probeTopic is the topic of the event Watch publishes to itself: its
// arrival proves the subscription live, so that a listing begun after it
// misses no event (see taskCache).
const probeTopic = "/outpost/watch-probe"

// taskCache keeps the namespace's tasks as containerd's events change
// them, between listings of them all. Listing the tasks asks every
// shim for its state in turn (containerd 1.6), and waits behind any shim
// busy creating a container: at 200 pods a listing took 60 ms to 1 s, at
// every round of the pod workers, which a batch of starts waited on.
//
// The kept tasks are used only while a subscription is known live (its
// probe came back) and a listing was begun after that: then every
// change since the listing began came as an event. Events that come
// while a listing is under way are applied on its result too, since the
// listing may have read a task before or after each of them.
type taskCache struct {
	mu       sync.Mutex
	sub      uint64 // the live subscription, 0 for none
	next     uint64 // the last subscription number handed out
	synced   uint64 // the subscription tasks was listed under, 0 for none
	listedAt time.Time
	tasks    map[string]taskState // by container ID
	listing  int                  // listings under way
	log      []taskEvent          // the events since the first of them began
}

// taskState is what List needs of a task.
type taskState struct {
	status   tasktypes.Status
	exit     uint32
	exitedAt *timestamppb.Timestamp
}

// process returns st as containerd's task listing would.
func (st taskState) process(id string) *tasktypes.Process {
	return &tasktypes.Process{ID: id, ContainerID: id, Status: st.status, ExitStatus: st.exit, ExitedAt: st.exitedAt}
}

// taskStates returns the states of tasks, by container ID.
func taskStates(tasks []*tasktypes.Process) map[string]taskState {
	m := make(map[string]taskState, len(tasks))
	for _, t := range tasks {
		m[t.ID] = taskState{status: t.Status, exit: t.ExitStatus, exitedAt: t.ExitedAt}
	}
	return m
}

// taskEvent is a change of one task, as an event tells it.
type taskEvent struct {
	id     string // container ID
	status tasktypes.Status
	exit   uint32
	at     *timestamppb.Timestamp
	gone   bool // the task was deleted
}

// subscribing returns the number of a new subscription, not live until
// live is called with it.
func (c *taskCache) subscribing() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	return c.next
}

// live records that subscription n's probe came back.
func (c *taskCache) live(n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sub = n
}

// ended records that subscription n ended: until another is live, the
// kept tasks are not used.
func (c *taskCache) ended(n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sub == n {
		c.sub = 0
	}
	if c.synced == n {
		c.synced, c.tasks = 0, nil
	}
}

// get returns a copy of the kept tasks if they can be used at now.
func (c *taskCache) get(now time.Time) (map[string]taskState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sub == 0 || c.synced != c.sub || now.Sub(c.listedAt) >= fullListEvery {
		return nil, false
	}
	return maps.Clone(c.tasks), true
}

// beginList records a listing's start and returns what endList needs.
func (c *taskCache) beginList(now time.Time) listing {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listing++
	return listing{sub: c.sub, from: len(c.log), at: now}
}

// listing is a listing under way.
type listing struct {
	sub  uint64 // the subscription live at its start
	from int    // the log's length at its start
	at   time.Time
}

// endList records l's end, with its tasks if it succeeded (ok), and
// returns them brought up to date with the events that came meanwhile.
// If a subscription was live when l began and still is, they become the
// kept tasks.
func (c *taskCache) endList(l listing, tasks map[string]taskState, ok bool) map[string]taskState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		for _, e := range c.log[l.from:] {
			e.apply(tasks)
		}
		if l.sub != 0 && l.sub == c.sub && (c.synced != c.sub || !l.at.Before(c.listedAt)) {
			c.synced, c.listedAt = c.sub, l.at
			c.tasks = maps.Clone(tasks)
		}
	}
	if c.listing--; c.listing == 0 {
		c.log = nil
	}
	return tasks
}

// record applies e to the kept tasks and to the listings under way.
func (c *taskCache) record(e taskEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tasks != nil {
		e.apply(c.tasks)
	}
	if c.listing > 0 {
		c.log = append(c.log, e)
	}
}

// started records that this Runtime started the task of container id,
// for a listing before its event comes: a task kept as created is
// running. One not kept is left so (List asks containerd for a started
// container's missing task): it may have exited and been deleted since.
func (c *taskCache) started(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.tasks[id]; ok && t.status == tasktypes.Status_CREATED {
		c.tasks[id] = taskState{status: tasktypes.Status_RUNNING}
	}
}

// deleted records that this Runtime deleted the task of container id.
func (c *taskCache) deleted(id string) {
	c.record(taskEvent{id: id, gone: true})
}

// apply applies e to tasks.
func (e taskEvent) apply(tasks map[string]taskState) {
	if e.gone {
		delete(tasks, e.id)
		return
	}
	st := taskState{status: e.status}
	if e.status == tasktypes.Status_STOPPED {
		st.exit, st.exitedAt = e.exit, e.at
	}
	tasks[e.id] = st
}

// taskEventOf returns the change of a task that ev, an event of
// containerd, tells, and whether it tells one: of a task's init process,
// its creation, start, pause, resumption, exit and deletion.
func taskEventOf(ev any) (taskEvent, bool) {
	switch e := ev.(type) {
	case *apievents.TaskCreate:
		return taskEvent{id: e.ContainerID, status: tasktypes.Status_CREATED}, true
	case *apievents.TaskStart:
		return taskEvent{id: e.ContainerID, status: tasktypes.Status_RUNNING}, true
	case *apievents.TaskPaused:
		return taskEvent{id: e.ContainerID, status: tasktypes.Status_PAUSED}, true
	case *apievents.TaskResumed:
		return taskEvent{id: e.ContainerID, status: tasktypes.Status_RUNNING}, true
	case *apievents.TaskExit:
		if e.ID != e.ContainerID { // an exec'd process
			return taskEvent{}, false
		}
		return taskEvent{id: e.ContainerID, status: tasktypes.Status_STOPPED, exit: e.ExitStatus, at: e.ExitedAt}, true
	case *apievents.TaskDelete:
		if e.ID != "" && e.ID != e.ContainerID {
			return taskEvent{}, false
		}
		return taskEvent{id: e.ContainerID, gone: true}, true
	case *apievents.ContainerDelete:
		return taskEvent{id: e.ID, gone: true}, true
	}
	return taskEvent{}, false
}
