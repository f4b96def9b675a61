package flowcontrol

import (
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The users and groups the bootstrap schemas name, as upstream's
// authenticators name them.
const (
	groupMasters         = "system:masters"
	groupNodes           = "system:nodes"
	groupAuthenticated   = "system:authenticated"
	groupUnauthenticated = "system:unauthenticated"
	groupServiceAccounts = "system:serviceaccounts"
	userControllers      = "system:kube-controller-manager"
	userScheduler        = "system:kube-scheduler"
)

// BootstrapObjects returns upstream's mandatory and suggested priority
// levels and flow schemas (k8s.io/apiserver's flowcontrol bootstrap
// objects), levels first, as new objects the caller owns with their
// TypeMeta set for apiserver.Server.Ensure. Each is annotated for
// automatic update, as upstream's are. The mandatory ones are exempt and
// catch-all of each kind; validation holds objects of those names to
// these specs.
func BootstrapObjects() []runtime.Object {
	var objs []runtime.Object
	for _, pl := range bootstrapLevels() {
		objs = append(objs, pl)
	}
	for _, fs := range bootstrapSchemas() {
		objs = append(objs, fs)
	}
	return objs
}

func bootstrapLevels() []*flowcontrolv1.PriorityLevelConfiguration {
	queued := func(name string, shares, lendable, queues, handSize int32) *flowcontrolv1.PriorityLevelConfiguration {
		return level(name, flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: new(shares),
				LendablePercent:          new(lendable),
				LimitResponse: flowcontrolv1.LimitResponse{
					Type:    flowcontrolv1.LimitResponseTypeQueue,
					Queuing: &flowcontrolv1.QueuingConfiguration{Queues: queues, HandSize: handSize, QueueLengthLimit: 50},
				},
			},
		})
	}
	return []*flowcontrolv1.PriorityLevelConfiguration{
		// Mandatory.
		level(flowcontrolv1.PriorityLevelConfigurationNameExempt, flowcontrolv1.PriorityLevelConfigurationSpec{
			Type:   flowcontrolv1.PriorityLevelEnablementExempt,
			Exempt: &flowcontrolv1.ExemptPriorityLevelConfiguration{NominalConcurrencyShares: new(int32(0)), LendablePercent: new(int32(0))},
		}),
		level(flowcontrolv1.PriorityLevelConfigurationNameCatchAll, flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: new(int32(5)),
				LendablePercent:          new(int32(0)),
				LimitResponse:            flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			},
		}),
		// Suggested.
		queued("system", 30, 33, 64, 6),
		queued("node-high", 40, 25, 64, 6),
		queued("leader-election", 10, 0, 16, 4),
		queued("workload-high", 40, 50, 128, 6),
		queued("workload-low", 100, 90, 128, 6),
		queued("global-default", 20, 50, 128, 6),
	}
}

func bootstrapSchemas() []*flowcontrolv1.FlowSchema {
	everything := func(subjects ...flowcontrolv1.Subject) flowcontrolv1.PolicyRulesWithSubjects {
		return flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: subjects,
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
				Verbs: []string{flowcontrolv1.VerbAll}, APIGroups: []string{flowcontrolv1.APIGroupAll},
				Resources: []string{flowcontrolv1.ResourceAll}, Namespaces: []string{flowcontrolv1.NamespaceEvery}, ClusterScope: true,
			}},
			NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{
				Verbs: []string{flowcontrolv1.VerbAll}, NonResourceURLs: []string{flowcontrolv1.NonResourceAll},
			}},
		}
	}
	byUser, byNamespace := flowcontrolv1.FlowDistinguisherMethodByUserType, flowcontrolv1.FlowDistinguisherMethodByNamespaceType
	everyone := groups(groupUnauthenticated, groupAuthenticated)
	kubeSystemAccounts := flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindServiceAccount,
		ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Name: flowcontrolv1.NameAll, Namespace: metav1.NamespaceSystem}}
	return []*flowcontrolv1.FlowSchema{
		// Mandatory.
		schema(flowcontrolv1.FlowSchemaNameExempt, flowcontrolv1.PriorityLevelConfigurationNameExempt, 1, "", everything(groups(groupMasters)...)),
		schema(flowcontrolv1.FlowSchemaNameCatchAll, flowcontrolv1.PriorityLevelConfigurationNameCatchAll, 10000, byUser, everything(everyone...)),
		// Suggested.
		schema("probes", flowcontrolv1.PriorityLevelConfigurationNameExempt, 2, "", flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: everyone,
			NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{
				Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/readyz", "/livez"},
			}},
		}),
		schema("system-leader-election", "leader-election", 100, byUser, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: append(users(userControllers, userScheduler), kubeSystemAccounts),
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
				Verbs: []string{"get", "create", "update"}, APIGroups: []string{"coordination.k8s.io"},
				Resources: []string{"leases"}, Namespaces: []string{flowcontrolv1.NamespaceEvery},
			}},
		}),
		schema("system-node-high", "node-high", 400, byUser, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: groups(groupNodes),
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{
				{Verbs: []string{flowcontrolv1.VerbAll}, APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"},
					Namespaces: []string{flowcontrolv1.NamespaceEvery}, ClusterScope: true},
				{Verbs: []string{flowcontrolv1.VerbAll}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
					Namespaces: []string{flowcontrolv1.NamespaceEvery}},
			},
		}),
		schema("system-nodes", "system", 500, byUser, everything(groups(groupNodes)...)),
		schema("kube-controller-manager", "workload-high", 800, byNamespace, everything(users(userControllers)...)),
		schema("kube-scheduler", "workload-high", 800, byNamespace, everything(users(userScheduler)...)),
		schema("kube-system-service-accounts", "workload-high", 900, byNamespace, everything(kubeSystemAccounts)),
		schema("service-accounts", "workload-low", 9000, byUser, everything(groups(groupServiceAccounts)...)),
		schema("global-default", "global-default", 9900, byUser, everything(everyone...)),
	}
}

func level(name string, spec flowcontrolv1.PriorityLevelConfigurationSpec) *flowcontrolv1.PriorityLevelConfiguration {
	return &flowcontrolv1.PriorityLevelConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "PriorityLevelConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{flowcontrolv1.AutoUpdateAnnotationKey: "true"}},
		Spec:       spec,
	}
}

func schema(name, level string, precedence int32, method flowcontrolv1.FlowDistinguisherMethodType, rules flowcontrolv1.PolicyRulesWithSubjects) *flowcontrolv1.FlowSchema {
	fs := &flowcontrolv1.FlowSchema{
		TypeMeta:   metav1.TypeMeta{APIVersion: flowcontrolv1.SchemeGroupVersion.String(), Kind: "FlowSchema"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{flowcontrolv1.AutoUpdateAnnotationKey: "true"}},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level},
			MatchingPrecedence:         precedence,
			Rules:                      []flowcontrolv1.PolicyRulesWithSubjects{rules},
		},
	}
	if method != "" {
		fs.Spec.DistinguisherMethod = &flowcontrolv1.FlowDistinguisherMethod{Type: method}
	}
	return fs
}

func groups(names ...string) []flowcontrolv1.Subject {
	out := make([]flowcontrolv1.Subject, len(names))
	for i, n := range names {
		out[i] = flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: n}}
	}
	return out
}

func users(names ...string) []flowcontrolv1.Subject {
	out := make([]flowcontrolv1.Subject, len(names))
	for i, n := range names {
		out[i] = flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: n}}
	}
	return out
}

// mandatoryLevel and mandatorySchema return the mandatory object named
// name, or nil.
func mandatoryLevel(name string) *flowcontrolv1.PriorityLevelConfiguration {
	if name != flowcontrolv1.PriorityLevelConfigurationNameExempt && name != flowcontrolv1.PriorityLevelConfigurationNameCatchAll {
		return nil
	}
	for _, pl := range bootstrapLevels() {
		if pl.Name == name {
			return pl
		}
	}
	return nil
}

func mandatorySchema(name string) *flowcontrolv1.FlowSchema {
	if name != flowcontrolv1.FlowSchemaNameExempt && name != flowcontrolv1.FlowSchemaNameCatchAll {
		return nil
	}
	for _, fs := range bootstrapSchemas() {
		if fs.Name == name {
			return fs
		}
	}
	return nil
}
