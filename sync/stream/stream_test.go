package stream_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"go.uber.org/goleak"

	"github.com/outpost-mesh/outpost/internal/testca"
	"github.com/outpost-mesh/outpost/sync/memnet"
	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitLong = 10 * time.Second

// pair returns the two ends of one QUIC stream over a memnet: the end
// that opened it and the end that accepted it, both framed. Reads and
// writes fail after waitLong rather than hang the test.
func pair(t *testing.T) (opened, accepted *stream.Stream, rawOpened *quic.Stream) {
	t.Helper()
	n := memnet.New()
	ca := testca.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()

	spc, err := n.Listen("127.0.0.1:443")
	if err != nil {
		t.Fatal(err)
	}
	str := &quic.Transport{Conn: spc}
	ln, err := str.Listen(&tls.Config{Certificates: []tls.Certificate{ca.Serving(t)}, NextProtos: []string{"test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cpc, err := n.Listen("10.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	ctr := &quic.Transport{Conn: cpc}
	t.Cleanup(func() {
		ln.Close()
		str.Close()
		ctr.Close()
		spc.Close()
		cpc.Close()
	})
	cconn, err := ctr.Dial(ctx, spc.LocalAddr(), &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", NextProtos: []string{"test"}}, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { cconn.CloseWithError(0, "") })
	sconn, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { sconn.CloseWithError(0, "") })
	qo, err := cconn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qo.SetDeadline(time.Now().Add(waitLong))
	// A stream is announced to the peer by its first bytes.
	o := stream.New(qo)
	if err := o.Write(&wire.Ack{Revision: 1}); err != nil {
		t.Fatal(err)
	}
	qa, err := sconn.AcceptStream(ctx)
	if err != nil {
		t.Fatalf("accept stream: %v", err)
	}
	qa.SetDeadline(time.Now().Add(waitLong))
	a := stream.New(qa)
	if m, err := a.Read(); err != nil || m.(*wire.Ack).Revision != 1 {
		t.Fatalf("first frame = %#v, %v", m, err)
	}
	return o, a, qo
}

// isEnd reports whether err ends a stream: its clean end or a reset.
func isEnd(err error) bool {
	var se *quic.StreamError
	return errors.Is(err, io.EOF) || errors.As(err, &se)
}

func TestFrames(t *testing.T) {
	o, a, _ := pair(t)
	msgs := []wire.Message{&wire.Hello{CapabilityVersion: wire.CapabilityVersion, NodeName: "edge-1", LastRevision: 7}, &wire.Ack{Revision: 9}}
	for _, m := range msgs {
		if err := a.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	a.CloseWrite()
	for _, want := range msgs {
		got, err := o.Read()
		if err != nil || got.Type() != want.Type() {
			t.Fatalf("Read = %#v, %v; want %#v", got, err, want)
		}
	}
	if _, err := o.Read(); !errors.Is(err, io.EOF) {
		t.Errorf("Read after CloseWrite = %v, want io.EOF", err)
	}
	if o.BytesRead() != a.BytesWritten() {
		t.Errorf("read %d bytes, written %d", o.BytesRead(), a.BytesWritten())
	}
}

// TestFail: the peer reads the Error, then the end of the stream.
func TestFail(t *testing.T) {
	o, a, _ := pair(t)
	a.Fail(wire.CodeForbidden, "no")
	m, err := o.Read()
	if e, ok := m.(*wire.Error); err != nil || !ok || e.Code != wire.CodeForbidden || e.Message != "no" {
		t.Fatalf("Read = %#v, %v; want the Error", m, err)
	}
	if _, err := o.Read(); !isEnd(err) {
		t.Errorf("Read after the Error = %v, want the stream's end", err)
	}
}

// TestReadFailed: each way a Read fails is answered as its doc says.
func TestReadFailed(t *testing.T) {
	tooLarge := binary.AppendUvarint(nil, wire.DefaultMaxFrameSize+1)
	tooLarge = append(tooLarge, byte(wire.TypeAck), 0)
	for _, tc := range []struct {
		name string
		send []byte
		code wire.ErrorCode // of the Error frame the sender reads; 0 for none
	}{
		{"too large", tooLarge, wire.CodeTooLarge},
		{"malformed", []byte{2, byte(wire.TypeAck), 0, 0xff, 0xff}, wire.CodeBadRequest},
		{"clean end", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, a, qo := pair(t)
			qo.Write(tc.send)
			qo.Close()
			_, err := a.Read()
			if err == nil {
				t.Fatal("Read succeeded")
			}
			a.ReadFailed(err)
			m, err := o.Read()
			if tc.code == 0 {
				if !errors.Is(err, io.EOF) {
					t.Errorf("Read = %#v, %v; want io.EOF", m, err)
				}
				return
			}
			if e, ok := m.(*wire.Error); err != nil || !ok || e.Code != tc.code {
				t.Fatalf("Read = %#v, %v; want an Error of code %v", m, err, tc.code)
			}
		})
	}
}

// TestTunnel: the raw bytes that follow a frame, even in the same write,
// are read through Tunnel; CloseWrite is a half-close.
func TestTunnel(t *testing.T) {
	o, a, qo := pair(t)
	var first bytes.Buffer
	wire.NewWriter(&first).Write(&wire.TunnelOpen{Kind: "echo"})
	first.WriteString("early bytes")
	qo.Write(first.Bytes())
	if m, err := a.Read(); err != nil || m.Type() != wire.TypeTunnelOpen {
		t.Fatalf("Read = %#v, %v; want the TunnelOpen", m, err)
	}
	at, ot := a.Tunnel(), o.Tunnel()
	ot.Write([]byte(", then more"))
	ot.CloseWrite()
	got, err := io.ReadAll(at)
	if err != nil || string(got) != "early bytes, then more" {
		t.Fatalf("tunnel read %q, %v", got, err)
	}
	at.Write([]byte("reply"))
	at.Close()
	if got, err := io.ReadAll(ot); err != nil || string(got) != "reply" {
		t.Errorf("read after the half-close %q, %v; want the reply and the end", got, err)
	}
	ot.Close()
}

// TestAbortWhenDone: a Read blocked on a silent peer returns when ctx
// ends; stop before that leaves the stream be.
func TestAbortWhenDone(t *testing.T) {
	o, a, _ := pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	stop := o.AbortWhenDone(ctx)
	defer stop()
	errs := make(chan error, 1)
	go func() { _, err := o.Read(); errs <- err }()
	cancel()
	select {
	case err := <-errs:
		if !isEnd(err) {
			t.Errorf("Read after ctx ended = %v, want the stream reset", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Read still blocked after ctx ended")
	}
	if _, err := a.Read(); !isEnd(err) {
		t.Errorf("the peer's Read = %v, want the stream reset", err)
	}

	o, a, _ = pair(t)
	ctx, cancel = context.WithCancel(context.Background())
	if !o.AbortWhenDone(ctx)() {
		t.Error("stop before ctx ended reported nothing stopped")
	}
	cancel()
	a.Write(&wire.Ack{Revision: 2})
	if m, err := o.Read(); err != nil || m.(*wire.Ack).Revision != 2 {
		t.Errorf("Read after a stopped abort = %#v, %v", m, err)
	}
}
