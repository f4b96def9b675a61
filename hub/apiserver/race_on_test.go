//go:build race

package apiserver

// allocSlack multiplies the allocation bounds of the tests: under the race
// detector sync.Pool keeps little, so buffers are allocated anew.
const allocSlack = 3
