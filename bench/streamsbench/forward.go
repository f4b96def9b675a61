package streamsbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/outpost-mesh/outpost/bench/internal/childhub"
	"github.com/outpost-mesh/outpost/bench/report"
)

// PathResult is what one path to the server pod measured: straight to
// its IP over the node's bridge, or a port-forward through the hub.
type PathResult struct {
	Path     string `json:"path"`
	Protocol string `json:"protocol,omitempty"` // "" for the direct path
	// Throughput is the median of Fetches, the rates of the fetches of
	// the bulk file (bytes per second, from the request to the last
	// byte).
	Throughput float64   `json:"throughput_bytes_per_sec"`
	Fetches    []float64 `json:"fetches_bytes_per_sec"`
	// CPU is the CPU time the fetches cost, per GB fetched.
	CPU CPUCost `json:"cpu_seconds_per_gb"`
	// Request is a GET of a small file on a connection of its own, from
	// the dial to the response's last byte.
	Request report.Latency `json:"request"`
	// Echo is a line's round trip through one open connection to the
	// echo server.
	Echo report.Latency `json:"echo"`
}

// CPUCost is CPU seconds per GB carried, of the hub, the edge agent and
// the benchmark's client (client-go's port-forward and the HTTP client).
type CPUCost struct {
	Hub    float64 `json:"hub"`
	Agent  float64 `json:"agent"`
	Client float64 `json:"client"`
}

// cpuTimes are the CPU seconds used so far by the hub, the agent and
// this process.
type cpuTimes struct{ hub, agent, self float64 }

func (r *runner) readCPU() (cpuTimes, error) {
	var c cpuTimes
	for _, p := range []struct {
		pid string
		dst *float64
	}{{strconv.Itoa(r.hub.PID()), &c.hub}, {strconv.Itoa(r.node.PID()), &c.agent}, {"self", &c.self}} {
		s, err := childhub.ReadProc(p.pid)
		if err != nil {
			return c, err
		}
		*p.dst = s.CPUSeconds
	}
	return c, nil
}

// path is where a path reaches the server pod's HTTP and echo ports.
type path struct {
	res        *PathResult
	http, echo string
	stop       func()        // closes a port-forward; nil for the direct path
	errs       *lockedWriter // what the port-forward reported of its connections
}

// fail returns err about p, with what its port-forward reported.
func (p *path) fail(what string, err error) error {
	err = fmt.Errorf("%s: %s: %w", p.res.Path, what, err)
	if p.errs != nil {
		if s := p.errs.String(); s != "" {
			err = fmt.Errorf("%w; the port-forward reported: %s", err, strings.TrimSpace(s))
		}
	}
	return err
}

// lockedWriter collects what the port-forward's goroutines write.
type lockedWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() < 4<<10 {
		w.b.Write(p)
	}
	return len(p), nil
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// openPaths returns the direct path and a port-forward over each of the
// config's protocols, open; the caller must close them.
func (r *runner) openPaths(ctx context.Context) ([]*path, error) {
	paths := []*path{{
		res:  &PathResult{Path: "direct to the pod IP"},
		http: net.JoinHostPort(r.podIP, strconv.Itoa(httpPort)),
		echo: net.JoinHostPort(r.podIP, strconv.Itoa(echoPort)),
	}}
	for _, proto := range r.cfg.Protocols {
		p, err := r.portForward(ctx, proto)
		if err != nil {
			closePaths(paths)
			return nil, fmt.Errorf("port-forward over %s: %w", proto, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func closePaths(paths []*path) {
	for _, p := range paths {
		if p.stop != nil {
			p.stop()
		}
	}
}

// portForward starts a port-forward of the server pod's ports to ports
// the kernel picks on 127.0.0.1, as `kubectl port-forward` does, with
// client-go's dialer for proto: SPDY, or SPDY tunnelled in WebSocket.
func (r *runner) portForward(ctx context.Context, proto string) (*path, error) {
	dialer, err := r.forwardDialer(proto)
	if err != nil {
		return nil, err
	}
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	errs := &lockedWriter{}
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"},
		[]string{"0:" + strconv.Itoa(httpPort), "0:" + strconv.Itoa(echoPort)}, stopCh, readyCh, io.Discard, errs)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	stop := func() {
		close(stopCh)
		<-done
	}
	select {
	case <-readyCh:
	case err := <-done:
		return nil, fmt.Errorf("forward ports: %v %s", err, errs.String())
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil {
		stop()
		return nil, err
	}
	p := &path{res: &PathResult{Path: "port-forward over " + proto, Protocol: proto}, stop: stop, errs: errs}
	for _, fp := range ports {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(fp.Local)))
		switch fp.Remote {
		case httpPort:
			p.http = addr
		case echoPort:
			p.echo = addr
		}
	}
	if p.http == "" || p.echo == "" {
		stop()
		return nil, fmt.Errorf("forwarded %v, want ports %d and %d", ports, httpPort, echoPort)
	}
	return p, nil
}

// forwardDialer returns client-go's dialer of the server pod's
// portforward subresource over proto.
func (r *runner) forwardDialer(proto string) (httpstream.Dialer, error) {
	u := r.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(r.cfg.Namespace).Name(serverPod).SubResource("portforward").URL()
	switch proto {
	case ProtoSPDY:
		transport, upgrader, err := spdy.RoundTripperFor(r.rest)
		if err != nil {
			return nil, err
		}
		return spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u), nil
	case ProtoWebSocket:
		return portforward.NewSPDYOverWebsocketDialer(u, r.rest)
	}
	return nil, fmt.Errorf("unknown protocol %q", proto)
}

// measureForward measures every path, taking turns so that the machine's
// noise falls on all of them alike: the bulk fetches, then the small
// requests, then the echoes.
func (r *runner) measureForward(ctx context.Context, paths []*path) error {
	cpu := make([]cpuTimes, len(paths))
	for i := range r.cfg.BulkRuns {
		for pi, p := range paths {
			before, err := r.readCPU()
			if err != nil {
				return err
			}
			rate, err := r.fetchBulk(ctx, p.http)
			if err != nil {
				return p.fail("fetch the bulk file", err)
			}
			after, err := r.readCPU()
			if err != nil {
				return err
			}
			cpu[pi].hub += after.hub - before.hub
			cpu[pi].agent += after.agent - before.agent
			cpu[pi].self += after.self - before.self
			p.res.Fetches = append(p.res.Fetches, rate)
		}
		r.logf("bulk fetch %d of %d: %s", i+1, r.cfg.BulkRuns, rates(paths))
	}
	reqs := make([][]time.Duration, len(paths))
	for range r.cfg.Requests {
		for i, p := range paths {
			d, err := r.request(ctx, p.http)
			if err != nil {
				return p.fail("small request", err)
			}
			reqs[i] = append(reqs[i], d)
		}
	}
	echoes := make([][]time.Duration, len(paths))
	conns := make([]*echoConn, len(paths))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i, p := range paths {
		c, err := dialEcho(ctx, p.echo, r.cfg.OpTimeout)
		if err != nil {
			return p.fail("dial the echo server", err)
		}
		conns[i] = c
		// The first line waits for nc to start cat: not timed.
		if _, err := c.roundTrip(-1, r.cfg.OpTimeout); err != nil {
			return p.fail("echo", err)
		}
	}
	for n := range r.cfg.Echoes {
		for i, p := range paths {
			d, err := conns[i].roundTrip(n, r.cfg.OpTimeout)
			if err != nil {
				return p.fail("echo", err)
			}
			echoes[i] = append(echoes[i], d)
		}
	}
	gb := float64(r.cfg.BulkRuns) * float64(r.cfg.BulkBytes) / 1e9
	for i, p := range paths {
		p.res.CPU = CPUCost{Hub: cpu[i].hub / gb, Agent: cpu[i].agent / gb, Client: cpu[i].self / gb}
		p.res.Throughput = median(p.res.Fetches)
		p.res.Request = report.Summarize(reqs[i])
		p.res.Echo = report.Summarize(echoes[i])
	}
	return nil
}

func rates(paths []*path) string {
	var s []string
	for _, p := range paths {
		s = append(s, fmt.Sprintf("%s %s/s", p.res.Path, report.Bytes(uint64(p.res.Fetches[len(p.res.Fetches)-1]))))
	}
	return strings.Join(s, ", ")
}

// httpClient makes a connection per request, as busybox httpd closes
// each.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}

// fetchBulk fetches the bulk file from addr and returns its rate in
// bytes per second.
func (r *runner) fetchBulk(ctx context.Context, addr string) (float64, error) {
	start := time.Now()
	n, err := r.get(ctx, addr, "/bulk")
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	if n != int64(r.cfg.BulkBytes) {
		return 0, fmt.Errorf("got %d bytes, want %d", n, r.cfg.BulkBytes)
	}
	return float64(n) / took.Seconds(), nil
}

// request fetches the small file from addr and returns how long it took.
func (r *runner) request(ctx context.Context, addr string) (time.Duration, error) {
	start := time.Now()
	n, err := r.get(ctx, addr, "/small")
	if err != nil {
		return 0, err
	}
	if n != int64(len("small\n")) {
		return 0, fmt.Errorf("got %d bytes, want %d", n, len("small\n"))
	}
	return time.Since(start), nil
}

// get fetches path from the HTTP server at addr and returns the length
// of the body, read to its end.
func (r *runner) get(ctx context.Context, addr, path string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", path, resp.Status)
	}
	return io.Copy(io.Discard, resp.Body)
}

// echoConn is one connection to the echo server.
type echoConn struct {
	net.Conn
	br *bufio.Reader
}

func dialEcho(ctx context.Context, addr string, timeout time.Duration) (*echoConn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &echoConn{Conn: c, br: bufio.NewReader(c)}, nil
}

// roundTrip sends line n and returns how long it took to have it back.
func (c *echoConn) roundTrip(n int, timeout time.Duration) (time.Duration, error) {
	line := "echo " + strconv.Itoa(n) + "\n"
	start := time.Now()
	if err := c.SetDeadline(start.Add(timeout)); err != nil {
		return 0, err
	}
	if _, err := io.WriteString(c, line); err != nil {
		return 0, err
	}
	got, err := c.br.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if got != line {
		return 0, fmt.Errorf("echoed %q, want %q", got, line)
	}
	return time.Since(start), nil
}

// median returns the median of v, 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
