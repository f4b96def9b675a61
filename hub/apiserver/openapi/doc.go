// Package openapi builds the hub's OpenAPI v2 and v3 documents for the
// served Kubernetes kinds by reflection over their Go types (field docs from
// SwaggerDoc, names from json tags, patch strategies from struct tags) and
// serves them at /openapi/v2 and /openapi/v3 the way kube-apiserver does, so
// kubectl explain, apply and field validation work unchanged.
package openapi
