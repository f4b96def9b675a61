//go:build !unix

package report

// kernel is unknown where there is no uname.
func kernel() string { return "" }
