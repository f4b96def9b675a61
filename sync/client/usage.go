package client

import (
	"context"
	"fmt"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/outpost-mesh/outpost/sync/stream"
)

// usagePolls is how many times per UsageInterval usageLoop asks Usage
// again while it has nothing new.
const usagePolls = 5

// usageLoop sends the node's usage reports on a stream of their own, at
// most one per UsageInterval (counted across sessions, so that a flapping
// link does not send more), until ctx ends. The stream is opened with the
// first report, and starts with a full one: Usage is asked with no last
// report.
func (c *Client) usageLoop(ctx context.Context, conn *quic.Conn) error {
	c.usageLast = nil
	var st *stream.Stream
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		wait := c.cfg.UsageInterval - time.Since(c.usageSentAt)
		if wait <= 0 {
			u := c.cfg.Usage(c.usageLast)
			if u != nil {
				if st == nil {
					qs, err := conn.OpenStreamSync(ctx)
					if err != nil {
						if ctx.Err() != nil {
							return nil
						}
						return fmt.Errorf("open usage stream: %w", err)
					}
					st = stream.NewLean(qs)
				}
				if err := st.Write(u); err != nil {
					return fmt.Errorf("send usage: %w", err)
				}
				c.stats.UsageSent.Add(1)
				c.usageLast, c.usageSentAt = u, time.Now()
				wait = c.cfg.UsageInterval
			} else {
				wait = c.cfg.UsageInterval / usagePolls
			}
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
