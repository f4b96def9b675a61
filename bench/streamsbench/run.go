package streamsbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/bench/edgenode"
	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/bench/report"
)

// image is the pods' image, made from this machine's busybox and
// imported into the node's containerd.
const image = "outpost.dev/bench/busybox:1"

// The server pod's ports: busybox httpd serving the bulk and small files,
// and an nc echo server forking cat per connection.
const (
	httpPort = 8080
	echoPort = 9000
)

// The pods: server serves HTTP and echo; ticker copies what the benchmark
// writes into a FIFO on the node to its output, for logs -f.
const (
	serverPod = "server"
	tickerPod = "ticker"
	container = "main"
)

// Run measures the streams as cfg says and returns the report. It must
// run as root in a network namespace of its own (see edgenode.Isolate and
// edgenode.LoopbackUp). It starts a hub and an agent on fresh data dirs,
// runs the server and ticker pods and measures, for the direct path to
// the pod's IP and for each protocol: port-forward throughput, a small
// request's latency and a line's echo over an open connection; exec of
// `true` and a line's echo through `exec -i cat`; and the delivery of a
// line the pod writes to its log file and to `logs -f`. Everything the
// run made is removed before it returns, on error and on ctx's end too.
// progress receives a line per step.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := Check(cfg); err != nil {
		return nil, err
	}
	if err := edgenode.CheckIsolated(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cfg.Dir, "streams")
	if err != nil {
		return nil, fmt.Errorf("make the run's directory: %w", err)
	}
	r := &runner{cfg: cfg, dir: dir, progress: progress, res: &Result{}}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(progress, "remove %s: %v\n", dir, err)
		}
	}()
	defer r.close()
	r.load("start")
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	if err := r.measure(ctx); err != nil {
		return nil, fmt.Errorf("%w%s", err, r.node.LogTail())
	}
	r.load("end")
	return NewReport(cfg, r.res), nil
}

type runner struct {
	cfg      Config
	dir      string
	progress io.Writer
	res      *Result

	hub    *childhub.Hub
	rest   *rest.Config
	client kubernetes.Interface
	node   *edgenode.Node
	fifo   string // the node side of the ticker's FIFO
	podIP  string // the server's
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func (r *runner) load(phase string) { r.res.Load = append(r.res.Load, report.ReadLoadAvg(phase)) }

// start starts the hub and the node, imports the image and runs the
// pods.
func (r *runner) start(ctx context.Context) error {
	syncAddr, err := childhub.FreeUDPAddr()
	if err != nil {
		return err
	}
	r.logf("starting the hub")
	if r.hub, err = childhub.Start(r.cfg.Binary, filepath.Join(r.dir, "hub"), "127.0.0.1:0", syncAddr,
		"--controllers", "--allocate-node-cidrs", "--cluster-cidr", edgenode.ClusterCIDR); err != nil {
		return err
	}
	kubeconfig, err := r.hub.Kubeconfig(ctx, r.cfg.ReadyTimeout)
	if err != nil {
		return err
	}
	if r.rest, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	r.rest.QPS, r.rest.Burst, r.rest.UserAgent = -1, 1<<20, "outpost-bench-streams"
	if r.client, err = kubernetes.NewForConfig(r.rest); err != nil {
		return err
	}
	token, err := edgenode.Prepare(ctx, r.client, r.cfg.Namespace, "outpost bench streams")
	if err != nil {
		return err
	}
	hash, err := edgenode.CAHash(r.rest)
	if err != nil {
		return err
	}
	suffix := make([]byte, 2)
	rand.Read(suffix)
	logDir := r.cfg.LogDir
	if logDir == "" {
		logDir = r.dir
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("log dir: %w", err)
	}
	r.node = edgenode.New(edgenode.Options{
		Binary: r.cfg.EdgeBinary, ContainerdBinary: r.cfg.ContainerdBinary,
		Name: "streams-" + hex.EncodeToString(suffix), Dir: filepath.Join(r.dir, "node"), Bridge: "streams0",
		LogPath: filepath.Join(logDir, "agent.log"), Hub: syncAddr, Token: token, CAHash: hash,
	})
	r.logf("starting agent %s", r.node.Name)
	if err := r.node.Start(); err != nil {
		return err
	}
	if err := edgenode.WaitReady(ctx, r.client, r.node, r.cfg.JoinTimeout); err != nil {
		return err
	}
	r.logf("node Ready; importing %s", image)
	if err := edgenode.ImportBusybox(ctx, r.node, image, r.cfg.JoinTimeout); err != nil {
		return err
	}
	in := filepath.Join(r.dir, "in")
	if err := os.Mkdir(in, 0o755); err != nil {
		return fmt.Errorf("make the ticker's FIFO dir: %w", err)
	}
	r.fifo = filepath.Join(in, "fifo")
	if err := syscall.Mkfifo(r.fifo, 0o600); err != nil {
		return fmt.Errorf("make the ticker's FIFO: %w", err)
	}
	for _, p := range []*corev1.Pod{serverSpec(r.cfg, r.node.Name), tickerSpec(r.cfg, r.node.Name, in)} {
		if _, err := r.client.CoreV1().Pods(r.cfg.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
	}
	r.logf("waiting for the pods (the server writes %s first)", report.Bytes(uint64(r.cfg.BulkBytes)))
	ips, err := r.waitPods(ctx, serverPod, tickerPod)
	if err != nil {
		return err
	}
	r.podIP = ips[serverPod]
	return nil
}

// serverSpec is the server pod: busybox httpd serving /bulk (random
// bytes, cfg.BulkBytes) and /small on httpPort, and nc echoing each
// connection's lines back on echoPort. Ready once httpd listens, after
// the bulk file is written.
func serverSpec(cfg Config, node string) *corev1.Pod {
	script := "mkdir /www && head -c " + strconv.Itoa(cfg.BulkBytes) + " /dev/urandom > /www/bulk && echo small > /www/small && " +
		"httpd -p " + strconv.Itoa(httpPort) + " -h /www && exec nc -ll -p " + strconv.Itoa(echoPort) + " -e cat"
	p := benchPod(cfg, node, serverPod, "sh", "-c", script)
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(httpPort)}},
		PeriodSeconds: 1,
	}
	return p
}

// tickerSpec is the ticker pod: it copies each write into the FIFO in
// the node's directory in (mounted at /in) to its output, as lines.
func tickerSpec(cfg Config, node, in string) *corev1.Pod {
	p := benchPod(cfg, node, tickerPod, "sh", "-c", "while :; do cat /in/fifo; done")
	p.Spec.Volumes = []corev1.Volume{{Name: "in", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: in}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "in", MountPath: "/in"}}
	return p
}

func benchPod(cfg Config, node, name string, command ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: container, Image: image, Command: command, ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// waitPods waits for the named pods to run and be Ready, and returns
// their IPs.
func (r *runner) waitPods(ctx context.Context, names ...string) (map[string]string, error) {
	deadline := time.Now().Add(r.cfg.PodTimeout)
	for {
		if err := r.node.Running(); err != nil {
			return nil, err
		}
		ips, last := map[string]string{}, ""
		for _, n := range names {
			p, err := r.client.CoreV1().Pods(r.cfg.Namespace).Get(ctx, n, metav1.GetOptions{})
			switch {
			case err != nil:
				last = err.Error()
			case !ready(p):
				last = fmt.Sprintf("pod %s is %s, not Ready", n, p.Status.Phase)
			default:
				ips[n] = p.Status.PodIP
			}
		}
		if len(ips) == len(names) {
			return ips, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pods not Ready within %v: %s%s", r.cfg.PodTimeout, last, r.node.LogTail())
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// close removes the node and stops the hub; safe on a start left half
// made.
func (r *runner) close() {
	if r.node != nil {
		if err := r.node.Remove(r.cfg.StopTimeout); err != nil {
			r.logf("clean up the node: %v", err)
		}
	}
	if r.hub != nil {
		r.hub.Stop(r.cfg.StopTimeout)
	}
}

// measure runs every measurement, one kind after another so that each
// has the machine to itself: port-forward, exec, logs.
func (r *runner) measure(ctx context.Context) error {
	paths, err := r.openPaths(ctx)
	if err != nil {
		return err
	}
	err = r.measureForward(ctx, paths)
	closePaths(paths)
	if err != nil {
		return err
	}
	for _, p := range paths {
		r.res.Forward = append(r.res.Forward, *p.res)
	}
	r.load("port-forward")
	if r.res.Exec, err = r.measureExec(ctx); err != nil {
		return err
	}
	r.load("exec")
	if r.res.Logs, err = r.measureLogs(ctx); err != nil {
		return fmt.Errorf("logs -f: %w", err)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
