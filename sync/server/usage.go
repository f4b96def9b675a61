package server

import (
	"fmt"

	"github.com/outpost-mesh/outpost/sync/stream"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// usage hands the Usage frames of a node's usage stream to Config.Usage
// until the stream ends. The hub answers nothing on it.
func (s *Server) usage(node string, st *stream.Stream, first *wire.Usage) {
	m := wire.Message(first)
	for {
		u, ok := m.(*wire.Usage)
		if !ok {
			st.Fail(wire.CodeBadRequest, fmt.Sprintf("unexpected %v on the usage stream", m.Type()))
			return
		}
		s.stats.UsageReports.Add(1)
		if s.cfg.Usage != nil {
			s.cfg.Usage.PutUsage(node, u)
		}
		var err error
		if m, err = st.Read(); err != nil {
			st.ReadFailed(err)
			return
		}
	}
}
