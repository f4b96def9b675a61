//go:build !race

package apiserver

// allocSlack multiplies the allocation bounds of the tests; see
// race_on_test.go.
const allocSlack = 1
