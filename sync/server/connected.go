package server

// Connected reports whether node has a live connection now, on which
// OpenTunnel can reach it. The answer may be stale by the time it is
// used: OpenTunnel still reports ErrNotConnected then.
func (s *Server) Connected(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[node] != nil
}
