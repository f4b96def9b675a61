package store

// PageSizer sizes the pages of a list read a page at a time so that each
// holds about Bytes of values, whether the values are 1 KB or 1.5 MB: the
// first page asks for First keys, and each next one for as many as the
// average of the values seen so far says fit, at least 1 and at most Max.
type PageSizer struct {
	First, Max int64
	Bytes      int
}

// DefaultPageSizer reads pages of about 4 MiB, starting with 16 keys: at
// most 24 MiB for a first page of the largest values.
var DefaultPageSizer = PageSizer{First: 16, Max: 1000, Bytes: 4 << 20}

// Next returns the Limit of the page after seen keys whose values came to
// seenBytes.
func (p PageSizer) Next(seen, seenBytes int) int64 {
	if seen <= 0 {
		return p.First
	}
	avg := max(seenBytes/seen, 1)
	return min(max(int64(p.Bytes/avg), 1), p.Max)
}
