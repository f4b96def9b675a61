// Package quota says how much of each ResourceQuota resource an object
// uses and which quotas an object is counted in, as upstream's quota
// evaluators (pkg/quota/v1/evaluator/core) say: object counts
// (count/<resource>.<group> and the legacy names such as pods and
// services), pods' compute requests and limits, services' node ports
// and load balancers, claims' storage, and the pod scopes. It is pure:
// the resourcequota controller and the ResourceQuota admission plugin
// feed it objects and act on its answers. It imports no project package.
package quota
