// Package admission is the hub's admission chain: the policy a write must
// pass once the API machinery has prepared it and before it is stored,
// decided from the new object, the stored one and the user who asked, as
// upstream's validating admission plugins decide (NodeRestriction first).
// The rules are pure functions; the plugins adapt them to
// apiserver.Admission, and only the composition root wires them in.
package admission
