package streams_test

import (
	"testing"
	"time"

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
