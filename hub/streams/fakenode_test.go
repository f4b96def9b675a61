package streams_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/outpost-mesh/outpost/internal/tunneltest"
	"github.com/outpost-mesh/outpost/sync/server"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// fakeNode is a FAKE node side: an Opener that serves the tunnel contract
// in-process, for the pods it holds, instead of a real node over QUIC.
//   - logs: fakeLog's lines (the last tailLines with tailLines; each with
//     a timestamp with timestamps); previous: refused NotFound.
//   - exec: "sh -c 'exit N'" exits N; "cat" echoes stdin to stdout until
//     stdin ends and exits 0; "echo ARGS" writes ARGS to stdout and "oops"
//     to stderr; "size" prints the first terminal size it gets; "sleep"
//     waits for the hub to close; anything else cannot run (-1).
//   - attach: echoes stdin, exits 0 when stdin ends.
//   - portforward: port 80 echoes with half-close; other ports are refused
//     Unavailable, connection refused.
type fakeNode struct {
	mu sync.Mutex
	// pods maps "node/ns/name" to the uid the node holds.
	pods map[string]string
	// down lists nodes without a session.
	down map[string]bool
	// opened counts tunnels opened; open counts those not yet closed.
	opened, open int
	wg           sync.WaitGroup
}

const fakeLog = "line 1\nline 2\nline 3\n"

func newFakeNode() *fakeNode {
	return &fakeNode{pods: map[string]string{}, down: map[string]bool{}}
}

func (f *fakeNode) addPod(node, ns, name, uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[node+"/"+ns+"/"+name] = uid
}

func (f *fakeNode) setDown(node string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[node] = down
}

func (f *fakeNode) Connected(node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.down[node]
}

func (f *fakeNode) openCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

// wait waits for every tunnel's node side to end.
func (f *fakeNode) wait() { f.wg.Wait() }

func (f *fakeNode) OpenTunnel(ctx context.Context, node string, open *wire.TunnelOpen) (wire.TunnelStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[node] {
		return nil, fmt.Errorf("tunnel to %s: %w", node, server.ErrNotConnected)
	}
	uid, ok := f.pods[node+"/"+open.Param("namespace")+"/"+open.Param("name")]
	if !ok || uid != open.Param("uid") {
		return nil, &wire.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("pod %s/%s not found on node %s", open.Param("namespace"), open.Param("name"), node)}
	}
	switch open.Kind {
	case "logs":
		if open.Param("previous") == "true" {
			return nil, &wire.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("previous terminated container %q in pod %q not found", open.Param("container"), open.Param("name"))}
		}
	case "portforward":
		if open.Param("port") != "80" {
			return nil, &wire.Error{Code: wire.CodeUnavailable, Message: fmt.Sprintf("dial tcp 10.42.0.5:%s: connect: connection refused", open.Param("port"))}
		}
	case "exec", "attach":
	default:
		return nil, &wire.Error{Code: wire.CodeBadRequest, Message: "unknown kind " + open.Kind}
	}
	hub, nodeSide := tunneltest.Pair()
	f.opened++
	f.open++
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer func() {
			f.mu.Lock()
			f.open--
			f.mu.Unlock()
		}()
		defer nodeSide.Close()
		serveFake(open, nodeSide)
	}()
	return hub, nil
}

func serveFake(open *wire.TunnelOpen, st wire.TunnelStream) {
	switch open.Kind {
	case "logs":
		lines := strings.SplitAfter(strings.TrimSuffix(fakeLog, "\n"), "\n")
		if n := open.Param("tailLines"); n != "" {
			var k int
			fmt.Sscan(n, &k)
			lines = lines[max(0, len(lines)-k):]
		}
		for _, l := range lines {
			if !strings.HasSuffix(l, "\n") {
				l += "\n"
			}
			if open.Param("timestamps") == "true" {
				l = "2026-12-06T06:00:00.000000000Z " + l
			}
			if _, err := io.WriteString(st, l); err != nil {
				return
			}
		}
		if open.Param("follow") == "true" {
			io.Copy(io.Discard, st) // until the hub closes
		}
		st.CloseWrite()
	case "portforward":
		io.Copy(st, st)
		st.CloseWrite()
		io.Copy(io.Discard, st)
	case "exec", "attach":
		serveFakeCommand(open, st)
	}
}

func serveFakeCommand(open *wire.TunnelOpen, st wire.TunnelStream) {
	cw := wire.NewChunkWriter(st)
	cr := wire.NewChunkReader(st)
	var argv []string
	for _, p := range open.Params {
		if p.Name == "command" {
			argv = append(argv, p.Name+"="+p.Value)
			argv[len(argv)-1] = p.Value
		}
	}
	if open.Kind == "attach" {
		argv = []string{"cat"}
	}
	exit := func(code int, msg string) {
		cw.Write(wire.ChanExit, wire.AppendExit(nil, code, msg))
		st.CloseWrite()
	}
	switch {
	case len(argv) == 3 && argv[0] == "sh" && argv[1] == "-c" && strings.HasPrefix(argv[2], "exit "):
		var code int
		fmt.Sscan(strings.TrimPrefix(argv[2], "exit "), &code)
		exit(code, "")
	case argv[0] == "cat":
		for {
			ch, data, err := cr.Next()
			if err != nil {
				return // the hub went: killed
			}
			if ch != wire.ChanStdin {
				continue
			}
			if len(data) == 0 {
				break
			}
			if err := cw.Write(wire.ChanStdout, data); err != nil {
				return
			}
		}
		exit(0, "")
	case argv[0] == "echo":
		cw.Write(wire.ChanStdout, []byte(strings.Join(argv[1:], " ")+"\n"))
		cw.Write(wire.ChanStderr, []byte("oops\n"))
		exit(0, "")
	case argv[0] == "size":
		for {
			ch, data, err := cr.Next()
			if err != nil {
				return
			}
			if ch == wire.ChanResize {
				w, h, err := wire.ParseResize(data)
				if err != nil {
					exit(-1, err.Error())
					return
				}
				cw.Write(wire.ChanStdout, []byte(fmt.Sprintf("%dx%d\n", w, h)))
				exit(0, "")
				return
			}
		}
	case argv[0] == "sleep":
		for {
			if _, _, err := cr.Next(); err != nil {
				return
			}
		}
	default:
		exit(-1, fmt.Sprintf("exec: %q: executable file not found in $PATH", argv[0]))
	}
}
