package streams

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/outpost-mesh/outpost/sync/wire"
)

// The SPDY subprotocols of exec and attach, newest first.
var spdyProtocols = []string{
	remotecommand.StreamProtocolV4Name,
	remotecommand.StreamProtocolV3Name,
	remotecommand.StreamProtocolV2Name,
	remotecommand.StreamProtocolV1Name,
}

// The WebSocket subprotocols of exec and attach beyond wsstream's
// defaults ("", channel.k8s.io, base64.channel.k8s.io).
const (
	wsV4Binary = "v4.channel.k8s.io"
	wsV4Base64 = "v4.base64.channel.k8s.io"
	wsV5Binary = remotecommand.StreamProtocolV5Name
)

// rcOptions are the options of an exec or attach request.
type rcOptions struct {
	stdin, stdout, stderr, tty bool
	command                    []string
}

// rcParse reads the options of an exec or attach request, as kubelet
// does: a TTY has no separate stderr.
func rcParse(r *http.Request, sub string) (rcOptions, error) {
	q := r.URL.Query()
	var o rcOptions
	for _, p := range []struct {
		name string
		into *bool
	}{{"stdin", &o.stdin}, {"stdout", &o.stdout}, {"stderr", &o.stderr}, {"tty", &o.tty}} {
		if v := q.Get(p.name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, apierrors.NewBadRequest(fmt.Sprintf("%s: invalid boolean %q", p.name, v))
			}
			*p.into = b
		}
	}
	o.command = q["command"]
	if o.tty {
		o.stderr = false
	}
	switch {
	case !o.stdin && !o.stdout && !o.stderr:
		return o, apierrors.NewBadRequest("you must specify at least 1 of stdin, stdout, stderr")
	case sub == "exec" && len(o.command) == 0:
		return o, apierrors.NewBadRequest("you must specify at least one command for the container")
	case sub == "attach" && len(o.command) > 0:
		return o, apierrors.NewBadRequest("attach takes no command")
	}
	return o, nil
}

// clientStreams are the client's side of an exec or attach, whatever its
// protocol. A nil reader or writer is a stream the client did not ask for.
type clientStreams struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	resize         io.Reader // JSON TerminalSize objects, one after another
	// writeStatus reports how the command ended (nil: success).
	writeStatus func(st *metav1.Status) error
	// gone is closed when the client's connection ends; nil when the
	// protocol does not tell (then a failed write does).
	gone <-chan bool
	// closeWriters ends stdout and stderr (a half-close where the
	// protocol has one); close ends the connection and every stream.
	closeWriters func()
	close        func()
}

// serveRemoteCommand serves pods/exec and pods/attach over SPDY or
// WebSocket.
func (s *Server) serveRemoteCommand(w http.ResponseWriter, r *http.Request, pod *corev1.Pod, sub string) error {
	o, err := rcParse(r, sub)
	if err != nil {
		return err
	}
	name, err := container(pod, r.URL.Query().Get("container"))
	if err != nil {
		return err
	}
	ws := wsstream.IsWebSocketRequest(r)
	protocol := ""
	switch {
	case ws:
		if !wsProtocolOffered(r) {
			return apierrors.NewBadRequest(fmt.Sprintf("unable to upgrade: no supported WebSocket subprotocol in %q", r.Header.Get(wsstream.WebSocketProtocolHeader)))
		}
	case httpstream.IsUpgradeRequest(r):
		if protocol, err = httpstream.Handshake(r, w, spdyProtocols); err != nil {
			return nil // Handshake answered
		}
	default:
		return apierrors.NewBadRequest("Upgrade request required")
	}
	params := []wire.Param{{Name: "container", Value: name}}
	for _, c := range o.command {
		params = append(params, wire.Param{Name: "command", Value: c})
	}
	params = boolParams(params, "stdin", o.stdin)
	params = boolParams(params, "stdout", o.stdout)
	params = boolParams(params, "stderr", o.stderr)
	params = boolParams(params, "tty", o.tty)
	var (
		mu      sync.Mutex
		cs      *clientStreams
		idleCut bool
	)
	onIdle := func() {
		mu.Lock()
		defer mu.Unlock()
		idleCut = true
		if cs != nil {
			cs.close()
		}
	}
	t, err := s.openTunnel(r.Context(), pod, sub, params, onIdle)
	if err != nil {
		if !ws {
			w.Header().Del(httpstream.HeaderProtocolVersion)
		}
		return err
	}
	defer t.Close()
	var c *clientStreams
	if ws {
		c, err = s.wsStreams(w, r, o)
	} else {
		c, err = s.spdyStreams(w, r, o, protocol)
	}
	if err != nil {
		s.log.Debug("client streams not set up", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return nil // answered, or the connection is gone
	}
	mu.Lock()
	cs = c
	cut := idleCut
	mu.Unlock()
	defer c.close()
	if cut {
		return nil
	}
	s.pump(t, c, o, sub)
	return nil
}

// pump carries an exec or attach between the client's streams and the
// tunnel until the node reports how the command ended, the tunnel breaks
// or the client goes; it returns when every goroutine it started has.
func (s *Server) pump(t *tunnel, c *clientStreams, o rcOptions, sub string) {
	cw := wire.NewChunkWriter(t)
	var wg sync.WaitGroup
	if c.stdin != nil && o.stdin {
		wg.Go(func() {
			buf := make([]byte, copyBuffer)
			for {
				n, err := c.stdin.Read(buf)
				if n > 0 {
					if werr := cw.Write(wire.ChanStdin, buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					if err == io.EOF {
						_ = cw.End(wire.ChanStdin)
					}
					return
				}
			}
		})
	}
	if c.resize != nil && o.tty {
		wg.Go(func() {
			_ = readResizes(c.resize, func(width, height uint16) error {
				return cw.Write(wire.ChanResize, wire.AppendResize(nil, width, height))
			})
		})
	}
	if c.gone != nil {
		done := make(chan struct{})
		defer close(done)
		wg.Go(func() {
			select {
			case <-c.gone:
				t.Close() // the node kills the command
			case <-done:
			}
		})
	}
	st := s.relay(t, c, o, sub)
	c.closeWriters()
	_ = c.writeStatus(st)
	t.Close()
	c.close()
	wg.Wait()
}

// relay copies the node's output to the client until the exit chunk, and
// returns the status to report: nil for success.
func (s *Server) relay(t *tunnel, c *clientStreams, o rcOptions, sub string) *metav1.Status {
	cr := wire.NewChunkReader(t)
	for {
		ch, data, err := cr.Next()
		if err != nil {
			return internalStatus(fmt.Sprintf("the stream from the node ended before the command did: %v", err))
		}
		var out io.Writer
		switch ch {
		case wire.ChanStdout:
			out = c.stdout
		case wire.ChanStderr:
			out = c.stderr
			if out == nil && o.tty {
				out = c.stdout
			}
		case wire.ChanExit:
			code, msg, err := wire.ParseExit(data)
			if err != nil {
				return internalStatus(err.Error())
			}
			return exitStatus(sub, o.command, code, msg)
		default:
			continue
		}
		if out == nil || len(data) == 0 {
			continue
		}
		if _, err := out.Write(data); err != nil {
			return nil // the client is gone; nobody reads a status
		}
	}
}

// maxResize bounds the bytes of one terminal size message from a client,
// so that an endless JSON value cannot make the hub buffer it.
const maxResize = 4 << 10

// readResizes calls fn with each terminal size of r, JSON objects
// {"Width":W,"Height":H} one after another as kubectl sends them, until r
// ends, a message is not one or is over maxResize, or fn fails.
func readResizes(r io.Reader, fn func(width, height uint16) error) error {
	lr := &valueLimit{r: r}
	dec := json.NewDecoder(lr)
	for {
		lr.n = 0
		var size struct{ Width, Height uint16 }
		if err := dec.Decode(&size); err != nil {
			return err
		}
		if err := fn(size.Width, size.Height); err != nil {
			return err
		}
	}
}

// valueLimit fails a read once n passes maxResize.
type valueLimit struct {
	r io.Reader
	n int
}

var errResizeTooLarge = errors.New("terminal size message over the limit")

func (l *valueLimit) Read(p []byte) (int, error) {
	if l.n > maxResize {
		return 0, errResizeTooLarge
	}
	if len(p) > maxResize {
		p = p[:maxResize]
	}
	n, err := l.r.Read(p)
	l.n += n
	return n, err
}

// exitStatus is the status kubelet reports for a command that ended with
// code, or could not run (msg).
func exitStatus(sub string, command []string, code int, msg string) *metav1.Status {
	switch {
	case msg != "":
		return internalStatus(fmt.Sprintf("error executing command in container: %s", msg))
	case code == 0 || sub != "exec":
		return nil
	}
	return &metav1.Status{
		Status: metav1.StatusFailure,
		Reason: remotecommand.NonZeroExitCodeReason,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{
			{Type: remotecommand.ExitCodeCauseType, Message: strconv.Itoa(code)},
		}},
		Message: fmt.Sprintf("command terminated with non-zero exit code: error executing command %v, exit code %d", command, code),
	}
}

func internalStatus(msg string) *metav1.Status {
	st := apierrors.NewInternalError(errors.New(msg)).Status()
	return &st
}

// v4Status writes st as JSON (success when nil), as protocols v4 and v5 do.
func v4Status(w io.Writer) func(st *metav1.Status) error {
	return func(st *metav1.Status) error {
		if st == nil {
			st = &metav1.Status{Status: metav1.StatusSuccess}
		}
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
}

// v1Status writes st's message, nothing on success, as protocols v1-v3 do.
func v1Status(w io.Writer) func(st *metav1.Status) error {
	return func(st *metav1.Status) error {
		if st == nil || st.Status == metav1.StatusSuccess {
			return nil
		}
		_, err := w.Write([]byte(st.Message))
		return err
	}
}

// spdyStreams upgrades r to SPDY and waits for the client's streams.
func (s *Server) spdyStreams(w http.ResponseWriter, r *http.Request, o rcOptions, protocol string) (*clientStreams, error) {
	type streamAndReply struct {
		httpstream.Stream
		replySent <-chan struct{}
	}
	stop := make(chan struct{})
	streams := make(chan streamAndReply)
	conn := spdy.NewResponseUpgraderWithPings(0).UpgradeResponse(hijacker{w}, r, func(st httpstream.Stream, replySent <-chan struct{}) error {
		select {
		case streams <- streamAndReply{st, replySent}:
			return nil
		case <-stop:
			return errors.New("stream not expected")
		}
	})
	if conn == nil {
		close(stop)
		return nil, errors.New("upgrade failed")
	}
	conn.SetIdleTimeout(s.cfg.IdleTimeout)
	expect := 1 // error
	for _, on := range []bool{o.stdin, o.stdout, o.stderr, o.tty && protocol != remotecommand.StreamProtocolV2Name && protocol != remotecommand.StreamProtocolV1Name} {
		if on {
			expect++
		}
	}
	c := &clientStreams{gone: conn.CloseChan()}
	var errStream, stdout, stderr httpstream.Stream
	var replies []<-chan struct{}
	timer := time.NewTimer(s.cfg.StreamCreationTimeout)
	defer timer.Stop()
	for got := 0; got < expect; {
		select {
		case st := <-streams:
			replies = append(replies, st.replySent)
			switch st.Headers().Get(corev1.StreamType) {
			case corev1.StreamTypeError:
				errStream = st
			case corev1.StreamTypeStdin:
				c.stdin = st
			case corev1.StreamTypeStdout:
				stdout, c.stdout = st, st
			case corev1.StreamTypeStderr:
				stderr, c.stderr = st, st
			case corev1.StreamTypeResize:
				c.resize = st
			default:
				st.Reset()
				continue
			}
			got++
		case <-timer.C:
			close(stop)
			conn.Close()
			return nil, errors.New("timed out waiting for client streams")
		case <-conn.CloseChan():
			close(stop)
			conn.Close()
			return nil, errors.New("client connection closed")
		}
	}
	for _, rs := range replies {
		select {
		case <-rs:
		case <-timer.C:
			close(stop)
			conn.Close()
			return nil, errors.New("timed out replying to client streams")
		}
	}
	if errStream == nil {
		close(stop)
		conn.Close()
		return nil, errors.New("no error stream")
	}
	if protocol == remotecommand.StreamProtocolV4Name {
		c.writeStatus = v4Status(errStream)
	} else {
		c.writeStatus = v1Status(errStream)
	}
	c.closeWriters = func() {
		for _, st := range []httpstream.Stream{stdout, stderr} {
			if st != nil {
				st.Close()
			}
		}
	}
	var once sync.Once
	c.close = func() {
		once.Do(func() {
			errStream.Close()
			close(stop)
			conn.Close()
		})
	}
	return c, nil
}

// wsProtocolOffered reports whether r offers a WebSocket subprotocol
// wsStreams serves (or none, the legacy default).
func wsProtocolOffered(r *http.Request) bool {
	offered := strings.TrimSpace(r.Header.Get(wsstream.WebSocketProtocolHeader))
	if offered == "" {
		return true
	}
	for _, p := range strings.Split(offered, ",") {
		switch strings.TrimSpace(p) {
		case wsV5Binary, wsV4Binary, wsV4Base64, wsstream.ChannelWebSocketProtocol, wsstream.Base64ChannelWebSocketProtocol:
			return true
		}
	}
	return false
}

// wsStreams upgrades r to a WebSocket with kubelet's channels: stdin,
// stdout, stderr, error, resize.
func (s *Server) wsStreams(w http.ResponseWriter, r *http.Request, o rcOptions) (*clientStreams, error) {
	ch := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	channels := []wsstream.ChannelType{
		ch(o.stdin, wsstream.ReadChannel),
		ch(o.stdout, wsstream.WriteChannel),
		ch(o.stderr, wsstream.WriteChannel),
		// The error channel is read too, though clients send nothing on
		// it: its end says that the connection ended.
		wsstream.ReadWriteChannel,
		ch(o.tty, wsstream.ReadChannel),
	}
	protocols := wsstream.NewDefaultChannelProtocols(channels)
	protocols[wsV4Binary] = wsstream.ChannelProtocolConfig{Binary: true, Channels: channels}
	protocols[wsV4Base64] = wsstream.ChannelProtocolConfig{Binary: false, Channels: channels}
	protocols[wsV5Binary] = wsstream.ChannelProtocolConfig{Binary: true, Channels: channels}
	conn := wsstream.NewConn(protocols)
	conn.SetIdleTimeout(s.cfg.IdleTimeout)
	protocol, streams, err := conn.Open(hijacker{w}, s.withWSLogger(r))
	if err != nil {
		return nil, err
	}
	// An empty message on the lowest writable channel tells the client
	// the connection is ready, as kubelet sends it.
	switch {
	case o.stdout:
		streams[remotecommand.StreamStdOut].Write(nil)
	case o.stderr:
		streams[remotecommand.StreamStdErr].Write(nil)
	default:
		streams[remotecommand.StreamErr].Write(nil)
	}
	gone := make(chan bool)
	go func() { // ends when the connection does (c.close or the client)
		io.Copy(io.Discard, streams[remotecommand.StreamErr])
		close(gone)
	}()
	c := &clientStreams{closeWriters: func() {}, gone: gone}
	if o.stdin {
		c.stdin = streams[remotecommand.StreamStdIn]
	}
	if o.stdout {
		c.stdout = streams[remotecommand.StreamStdOut]
	}
	if o.stderr {
		c.stderr = streams[remotecommand.StreamStdErr]
	}
	if o.tty {
		c.resize = streams[remotecommand.StreamResize]
	}
	switch protocol {
	case wsV5Binary, wsV4Binary, wsV4Base64:
		c.writeStatus = v4Status(streams[remotecommand.StreamErr])
	default:
		c.writeStatus = v1Status(streams[remotecommand.StreamErr])
	}
	var once sync.Once
	c.close = func() { once.Do(func() { conn.Close() }) }
	return c, nil
}
