package nftlb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// txn is one nf_tables transaction: built with a nftables.Conn, sent by
// send as one batch.
//
// nftables.Conn.Flush asks the kernel to acknowledge every message and
// sends the batch with the socket's default buffer. A Sync of thousands
// of frontends is a batch of 10^5 messages: tens of megabytes, more than
// the default send buffer holds (EMSGSIZE), and as many acknowledgements,
// more than the receive buffer holds, so that the kernel drops some after
// it has committed (ENOBUFS: the outcome is then unknown). So Flush only
// hands the batch to transport, which sends it on a socket of its own
// sized to it, asks an acknowledgement of the last message alone (the
// kernel reports every failing message anyway, and a failure aborts the
// whole batch), and answers Flush's wait for each acknowledgement itself.
type txn struct {
	*nftables.Conn
	ns       int // netns fd, or 0 for the caller's
	deadline time.Time
	sent     bool
	err      error
}

func newTxn(ctx context.Context, ns int) *txn {
	t := &txn{ns: ns}
	if d, ok := ctx.Deadline(); ok {
		t.deadline = d
	} else {
		t.deadline = time.Now().Add(time.Minute)
	}
	// Cannot fail: New dials only lasting connections.
	t.Conn, _ = nftables.New(nftables.WithTestDial(t.transport))
	return t
}

// commit sends the transaction. Nothing queued: nothing sent, nil.
func (t *txn) commit() error {
	if err := t.Flush(); err != nil {
		return err
	}
	if !t.sent {
		return nil
	}
	t.sent = false
	return t.err
}

// okAck is the acknowledgement transport gives Flush for each message.
var okAck = []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 4+16)}}

func (t *txn) transport(req []netlink.Message) ([]netlink.Message, error) {
	if req == nil {
		// Flush waits for the acknowledgement of a message the batch
		// held; the batch's outcome is in t.err.
		return okAck, nil
	}
	t.sent = true
	t.err = t.send(req)
	return nil, nil
}

// send sends the batch req (begin, messages, end) and waits for the
// kernel's verdict.
func (t *txn) send(req []netlink.Message) error {
	if len(req) < 3 {
		return nil
	}
	size := 0
	for i := range req {
		req[i].Header.Sequence, req[i].Header.PID = 0, 0
		req[i].Header.Length = 0
		// Echoes of every rule added would fill the receive buffer.
		req[i].Header.Flags &^= unix.NLM_F_ECHO
		if i != len(req)-2 {
			req[i].Header.Flags &^= netlink.Acknowledge
		} else {
			req[i].Header.Flags |= netlink.Acknowledge
		}
		size += 16 + (len(req[i].Data)+3)&^3
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: t.ns})
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer c.Close()
	if err := setSockBuf(c, unix.SO_SNDBUFFORCE, size+(64<<10)); err != nil {
		return err
	}
	// The errors of a failing batch: room for many before ENOBUFS, which
	// then also says it failed.
	if err := setSockBuf(c, unix.SO_RCVBUFFORCE, 4<<20); err != nil {
		return err
	}
	if err := c.SetOption(netlink.ExtendedAcknowledge, true); err != nil {
		return fmt.Errorf("netlink extended ack: %w", err)
	}
	if err := c.SetReadDeadline(t.deadline); err != nil {
		return fmt.Errorf("netlink deadline: %w", err)
	}
	sent, err := c.SendMessages(req)
	if err != nil {
		return fmt.Errorf("send nftables batch of %d messages: %w", len(req)-2, err)
	}
	last := sent[len(sent)-2].Header.Sequence
	for {
		msgs, err := c.Receive()
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				return fmt.Errorf("nftables batch failed: %w", err)
			}
			return fmt.Errorf("nftables batch: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type == netlink.Error && m.Header.Sequence == last {
				return nil
			}
		}
	}
}

func setSockBuf(c *netlink.Conn, opt, size int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, size)
	}); err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("netlink socket buffer: %w", serr)
	}
	return nil
}
