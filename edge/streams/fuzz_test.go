package streams_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/outpost-mesh/outpost/edge/runtime"
	"github.com/outpost-mesh/outpost/edge/streams"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// FuzzParseLogOptions: the options of a logs tunnel, which come off the
// network, never panic and never come out negative.
func FuzzParseLogOptions(f *testing.F) {
	f.Add("c", "true", "10", "100", "60", "2026-12-06T10:00:00Z")
	f.Add("", "", "-1", "x", "", "yesterday")
	f.Fuzz(func(t *testing.T, container, follow, tail, limit, since, sinceTime string) {
		o := &wire.TunnelOpen{Kind: "logs", Params: []wire.Param{
			{Name: "container", Value: container}, {Name: "follow", Value: follow},
			{Name: "tailLines", Value: tail}, {Name: "limitBytes", Value: limit},
			{Name: "sinceSeconds", Value: since}, {Name: "sinceTime", Value: sinceTime},
		}}
		opt, err := streams.ParseLogOptions(o, time.Unix(1e9, 0))
		if err != nil {
			return
		}
		if opt.TailLines < -1 || opt.LimitBytes < 0 || opt.Container == "" {
			t.Errorf("ParseLogOptions(%v) = %+v", o.Params, opt)
		}
	})
}

// FuzzExecChunks: whatever bytes the hub sends on an exec tunnel, with a
// terminal or without, the node serves it to its end without a panic.
func FuzzExecChunks(f *testing.F) {
	var good bytes.Buffer
	cw := wire.NewChunkWriter(&good)
	cw.Write(wire.ChanResize, wire.AppendResize(nil, 80, 24))
	cw.Write(wire.ChanStdin, []byte("hello"))
	cw.End(wire.ChanStdin)
	cw.Write(wire.ChanStdin, []byte("late"))
	f.Add(good.Bytes(), false)
	f.Add(good.Bytes(), true)
	f.Add([]byte{wire.ChanResize, 1, 0x80}, true)
	f.Fuzz(func(t *testing.T, in []byte, tty bool) {
		e := newEnv(t, func(ctx context.Context, pod runtime.PodRef, c string, opts runtime.ExecOptions) (int, error) {
			_, err := io.Copy(opts.Stdout, opts.Stdin)
			return 0, err
		})
		e.addPod("web", "u1")
		params := []string{"container", "c", "command", "cat", "stdin", "true", "stdout", "true"}
		if tty {
			params = append(params, "tty", "true")
		}
		hub, err := e.start(open("exec", "web", "u1", params...))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			hub.Write(in)
			hub.CloseWrite()
		}()
		io.Copy(io.Discard, hub) // to the node's end of the tunnel
	})
}
