package nftlb

import (
	"context"
	"encoding/binary"
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
	// Marshal the batch into one buffer of the right size: the
	// library's grows it by appending, at a cost that shows at 10^5
	// messages. Sequence numbers are the messages' positions.
	size := 0
	for _, m := range req {
		size += nlmsgAlign(16 + len(m.Data))
	}
	buf := make([]byte, 0, size)
	for i, m := range req {
		flags := m.Header.Flags &^ (netlink.Acknowledge | unix.NLM_F_ECHO)
		if i == len(req)-2 {
			// The last message before the batch's end: its
			// acknowledgement says the batch committed.
			flags |= netlink.Acknowledge
		}
		buf = binary.NativeEndian.AppendUint32(buf, uint32(16+len(m.Data)))
		buf = binary.NativeEndian.AppendUint16(buf, uint16(m.Header.Type))
		buf = binary.NativeEndian.AppendUint16(buf, uint16(flags))
		buf = binary.NativeEndian.AppendUint32(buf, uint32(i+1))
		buf = binary.NativeEndian.AppendUint32(buf, 0)
		buf = append(buf, m.Data...)
		var pad [3]byte
		buf = append(buf, pad[:nlmsgAlign(len(m.Data))-len(m.Data)]...)
	}
	last := uint32(len(req) - 1)
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
	if err := sendRaw(c, buf); err != nil {
		return fmt.Errorf("send nftables batch of %d messages: %w", len(req)-2, err)
	}
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

func nlmsgAlign(n int) int { return (n + 3) &^ 3 }

// sendRaw sends buf, netlink messages, to the kernel in one sendmsg.
func sendRaw(c *netlink.Conn, buf []byte) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return !errors.Is(serr, unix.EAGAIN)
	})
	if err != nil {
		return err
	}
	return serr
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
