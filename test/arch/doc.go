// Package arch holds the tests that enforce the architecture of DESIGN.md on
// the whole module: the import rules between hub, edge, sync and netd, the
// edge binary linking nothing of the hub, and a doc comment on every package.
// It has no code of its own; the tests run `go list` on the module.
package arch
