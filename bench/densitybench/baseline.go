package densitybench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/outpost-mesh/outpost/bench/edgenode"
	"github.com/outpost-mesh/outpost/bench/report"
	"github.com/outpost-mesh/outpost/edge/agent"
	"github.com/outpost-mesh/outpost/edge/runtime/containerd"
	"github.com/outpost-mesh/outpost/internal/ociimage"
)

// Baseline is containerd and the OCI runtime alone, measured in the same
// run as the agent: the same containerd binary, image and batches, a
// shim per container as the agent's default, but no agent, no hub and no
// pod network. It is the floor under the agent's start times: what the
// machine takes to start the containers at all.
type Baseline struct {
	OCIRuntime string `json:"oci_runtime"`
	// Steps are the container starts at each pod count, Create of the
	// container to its task started, of the step's containers.
	Steps []BaselineStep `json:"steps"`
	// Start is over every container of the steps.
	Start report.Latency `json:"start"`
	// Reboot, measured with runc when the run has a reboot, is
	// containerd started afresh and as many containers as the reboot's
	// pods created and started at once: the floor under the reboot's
	// recovery.
	Reboot *BaselineReboot `json:"reboot,omitempty"`
}

// BaselineStep is the container starts of one pod count.
type BaselineStep struct {
	Pods  int            `json:"pods"`
	Start report.Latency `json:"start"`
}

// BaselineReboot is a containerd's start followed by Containers started
// at once.
type BaselineReboot struct {
	Containers int `json:"containers"`
	// ContainerdSeconds is when containerd answered, and Seconds when
	// the last container's task started, from containerd's start.
	ContainerdSeconds float64 `json:"containerd_seconds"`
	Seconds           float64 `json:"seconds"`
}

// baselineNamespace is the containerd namespace of the baseline's
// containers.
const baselineNamespace = "outpost-baseline"

// runBaseline measures containerd with ociRuntime alone, as Baseline
// says, and removes everything it made.
func (r *runner) runBaseline(ctx context.Context, ociRuntime string, reboot int) (b *Baseline, err error) {
	label := "baseline-" + ociRuntime
	r.load(label + " start")
	defer r.load(label + " end")
	// The node of edgenode names the containerd's socket, processes,
	// mounts and cgroups by its data dir and name, and removes them.
	n := edgenode.New(edgenode.Options{Name: "baseline", Dir: filepath.Join(r.dir, label)})
	defer func() {
		if rerr := n.Remove(r.cfg.StopTimeout); rerr != nil && err == nil {
			err = fmt.Errorf("clean up: %w", rerr)
		}
	}()
	bc := &baselineContainerd{node: n, ociRuntime: ociRuntime, binary: r.cfg.ContainerdBinary}
	r.logf("%s: containerd and %s alone, no agent, hub or pod network", label, ociRuntime)
	if _, err := bc.start(ctx, r.cfg.JoinTimeout); err != nil {
		return nil, err
	}
	defer bc.stop()
	if err := bc.importImage(ctx); err != nil {
		return nil, err
	}
	b = &Baseline{OCIRuntime: ociRuntime}
	var all []time.Duration
	have := 0
	for _, count := range r.cfg.Pods {
		var step []time.Duration
		for i := have; i < count; i += r.cfg.Batch {
			d, err := bc.run(ctx, i, min(i+r.cfg.Batch, count))
			if err != nil {
				return nil, err
			}
			step = append(step, d...)
		}
		have = count
		all = append(all, step...)
		st := BaselineStep{Pods: count, Start: report.Summarize(step)}
		b.Steps = append(b.Steps, st)
		r.logf("%s: %d containers: start p50 %s p99 %s", label, count, report.Duration(st.Start.P50), report.Duration(st.Start.P99))
		if err := sleep(ctx, r.cfg.Settle/2); err != nil {
			return nil, err
		}
	}
	b.Start = report.Summarize(all)
	if reboot == 0 {
		return b, nil
	}
	// The reboot's floor: everything gone, containerd started afresh,
	// the containers created and started at once.
	bc.stop()
	if err := n.PowerOff(); err != nil {
		return nil, fmt.Errorf("power off: %w", err)
	}
	started := time.Now()
	up, err := bc.start(ctx, r.cfg.JoinTimeout)
	if err != nil {
		return nil, err
	}
	if _, err := bc.run(ctx, have, have+reboot); err != nil {
		return nil, err
	}
	b.Reboot = &BaselineReboot{Containers: reboot, ContainerdSeconds: up.Seconds(), Seconds: time.Since(started).Seconds()}
	r.logf("%s: containerd started afresh, %d containers at once: all running %.2fs after its start (containerd answered at %.2fs)",
		label, reboot, b.Reboot.Seconds, b.Reboot.ContainerdSeconds)
	return b, nil
}

// baselineContainerd is a containerd of the baseline's, run by the
// agent's supervisor, and its client.
type baselineContainerd struct {
	node       *edgenode.Node
	ociRuntime string
	binary     string

	c      *client.Client
	img    client.Image
	cancel context.CancelFunc
	done   chan struct{}
}

// start starts containerd and connects to it, returning how long it took
// to answer.
func (bc *baselineContainerd) start(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	scfg := containerd.DefaultSupervisorConfig(filepath.Join(bc.node.Dir, agent.ContainerdDir))
	scfg.Binary = bc.binary
	scfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	sup, err := containerd.NewSupervisor(scfg)
	if err != nil {
		return 0, err
	}
	started := time.Now()
	sctx, cancel := context.WithCancel(context.Background())
	bc.cancel, bc.done = cancel, make(chan struct{})
	go func() {
		defer close(bc.done)
		_ = sup.Run(sctx)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-sup.Ready():
	case <-t.C:
		return 0, fmt.Errorf("containerd did not answer within %v", timeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	up := time.Since(started)
	if bc.c, err = client.New(sup.Address(), client.WithDefaultNamespace(baselineNamespace)); err != nil {
		return 0, fmt.Errorf("connect to containerd: %w", err)
	}
	if bc.img != nil {
		img, err := bc.c.GetImage(ctx, bc.img.Name())
		if err != nil {
			return 0, fmt.Errorf("image after the restart: %w", err)
		}
		bc.img = img
	}
	return up, nil
}

// stop closes the client and stops containerd; the shims and containers
// stay. It is safe to call twice.
func (bc *baselineContainerd) stop() {
	if bc.c != nil {
		bc.c.Close()
		bc.c = nil
	}
	if bc.cancel != nil {
		bc.cancel()
		<-bc.done
		bc.cancel = nil
	}
}

// importImage imports and unpacks the busybox image the agent's pods
// run.
func (bc *baselineContainerd) importImage(ctx context.Context) error {
	im, err := ociimage.Busybox(image)
	if err != nil {
		return fmt.Errorf("build the image: %w", err)
	}
	var buf bytes.Buffer
	if err := im.WriteOCI(&buf); err != nil {
		return fmt.Errorf("build the image: %w", err)
	}
	imgs, err := bc.c.Import(ctx, &buf)
	if err != nil {
		return fmt.Errorf("import the image: %w", err)
	}
	if len(imgs) != 1 {
		return fmt.Errorf("import gave %d images, want 1", len(imgs))
	}
	img := client.NewImage(bc.c, imgs[0])
	if err := img.Unpack(ctx, "overlayfs"); err != nil {
		return fmt.Errorf("unpack the image: %w", err)
	}
	bc.img = img
	return nil
}

// run creates and starts containers from..to-1 at once, each sleeping,
// each in a shim of its own and a cgroup under the node's, and returns
// each one's time from its Create to its task started, sorted.
func (bc *baselineContainerd) run(ctx context.Context, from, to int) ([]time.Duration, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		out  []time.Duration
		errs []error
	)
	runcOpts := &options.Options{Root: filepath.Join(bc.node.Dir, "runc")}
	if bc.ociRuntime != RuntimeRunc {
		runcOpts.BinaryName = bc.ociRuntime
	}
	for i := from; i < to; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "baseline-" + strconv.Itoa(i)
			started := time.Now()
			err := func() error {
				ctr, err := bc.c.NewContainer(ctx, id,
					client.WithImage(bc.img),
					client.WithSnapshotter("overlayfs"),
					client.WithNewSnapshot(id, bc.img),
					client.WithRuntime("io.containerd.runc.v2", runcOpts),
					client.WithNewSpec(oci.WithImageConfig(bc.img), oci.WithProcessArgs("sleep", "86400"),
						oci.WithCgroup(bc.node.CgroupRoot()+"/"+id),
						oci.WithAnnotations(map[string]string{"io.kubernetes.cri.sandbox-id": id})),
				)
				if err != nil {
					return fmt.Errorf("create container %s: %w", id, err)
				}
				task, err := ctr.NewTask(ctx, cio.NullIO)
				if err != nil {
					return fmt.Errorf("create task %s: %w", id, err)
				}
				if err := task.Start(ctx); err != nil {
					return fmt.Errorf("start task %s: %w", id, err)
				}
				return nil
			}()
			d := time.Since(started)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out = append(out, d)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}
