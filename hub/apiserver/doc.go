// Package apiserver is the hub's generic Kubernetes REST machinery: it serves
// every resource described by a Resource over the store, with discovery,
// CRUD, list and watch, patch, subresources, Table output and errors as
// metav1.Status. Resources contribute only their Rules (hub/registry).
package apiserver
