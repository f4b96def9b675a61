// Package certificates holds the hub's rules for the certificates.k8s.io/v1
// resource certificatesigningrequests, as upstream Kubernetes defines them:
// validation of the request and its conditions, what the main resource and
// its status and approval subresources may each change, and the printer
// columns. Who asked for a certificate (spec.username, uid, groups, extra)
// is hub/admission's to fill in, since the registry knows nothing of users;
// signing is a controller's (hub/controllers/csrsigning).
package certificates

import (
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// csr is the resource's Go type, for brevity.
type csr = certificatesv1.CertificateSigningRequest

// ApprovalSubresource is the path element of the subresource through which
// a CSR is approved or denied (kubectl certificate approve/deny).
const ApprovalSubresource = "approval"

// Resources returns the certificates.k8s.io/v1 resources, with ages in
// printed tables and condition timestamps taken from the wall clock.
func Resources() []apiserver.Resource { return ResourcesWithClock(nil) }

// ResourcesWithClock is Resources with the clock now, or the wall clock
// if now is nil.
func ResourcesWithClock(now func() time.Time) []apiserver.Resource {
	if now == nil {
		now = time.Now
	}
	return []apiserver.Resource{{
		GroupVersion: certificatesv1.SchemeGroupVersion,
		Kind:         "CertificateSigningRequest",
		Plural:       "certificatesigningrequests",
		Singular:     "certificatesigningrequest",
		ShortNames:   []string{"csr"},
		New:          func() runtime.Object { return &csr{} },
		NewList:      func() runtime.Object { return &certificatesv1.CertificateSigningRequestList{} },
		AddToScheme:  certificatesv1.AddToScheme,
		Status:       true,
		Rules:        csrRules(now),
		Subresources: []apiserver.Subresource{{
			Name:     ApprovalSubresource,
			Update:   approvalUpdater(now),
			Validate: validateApproval,
		}},
	}}
}

// csrRules are the rules of certificatesigningrequests with the clock now
// (non-nil). A CSR has no defaults in v1 and no field selectors beyond
// metadata's, and a PUT does not create one.
func csrRules(now func() time.Time) *typed.Rules[*csr] {
	return &typed.Rules[*csr]{
		Now:           now,
		PrepareCreate: prepareCreate,
		PrepareUpdate: prepareUpdate,
		Check:         validateCreate,
		CheckUpdate:   validateUpdate,
		PrepareStatus: func(obj, old *csr) { prepareStatusUpdate(obj, old, now()) },
		CheckStatus:   validateStatusUpdate,
		TableColumns:  csrColumns(),
		TableRow:      csrRow,
	}
}

// prepareCreate clears the status: nobody creates a request already
// approved or issued. Unlike upstream's strategy it leaves the requestor
// fields alone, which admission has set from the user before this runs.
func prepareCreate(c *csr) {
	c.Status = certificatesv1.CertificateSigningRequestStatus{Conditions: []certificatesv1.CertificateSigningRequestCondition{}}
}

// prepareUpdate keeps spec and status as stored: a CSR changes after
// creation only through its subresources (and in its metadata).
func prepareUpdate(c, old *csr) {
	c.Spec = old.Spec
	c.Status = old.Status
}

// prepareStatusUpdate is upstream's status strategy: the spec is the
// stored one, and the Approved and Denied conditions are kept as stored
// where the update holds as many of them (adding or removing some is left
// for validation to refuse), so that the status subresource cannot
// approve. New conditions get their timestamps. The machinery offers no
// preparation step for a status update, so the rules' status validation
// calls this first.
func prepareStatusUpdate(c, old *csr, now time.Time) {
	c.Spec = old.Spec
	preserveConditions(c, old, certificatesv1.CertificateApproved)
	preserveConditions(c, old, certificatesv1.CertificateDenied)
	stampConditions(c.Status.Conditions, old.Status.Conditions, now)
}

// approvalUpdater returns the approval subresource's Update: it takes the
// request's conditions, all of them, into the stored object, with
// timestamps from now where missing, as upstream's approval strategy does;
// validation then refuses the removal of Approved, Denied and Failed
// conditions.
func approvalUpdater(now func() time.Time) func(obj, old runtime.Object) {
	return func(obj, old runtime.Object) {
		req, ok1 := obj.(*csr)
		stored, ok2 := old.(*csr)
		if !ok1 || !ok2 {
			return
		}
		prev := stored.Status.Conditions
		stored.Status.Conditions = nil
		for _, c := range req.Status.Conditions {
			stored.Status.Conditions = append(stored.Status.Conditions, *c.DeepCopy())
		}
		stampConditions(stored.Status.Conditions, prev, now())
	}
}

// validateApproval is the approval subresource's Validate.
func validateApproval(obj, old runtime.Object) field.ErrorList {
	c, ok := obj.(*csr)
	if !ok {
		return typed.WrongType[*csr](obj)
	}
	o, ok := old.(*csr)
	if !ok {
		return typed.WrongType[*csr](old)
	}
	return validateApprovalUpdate(c, o)
}

// preserveConditions copies the stored conditions of type t over those of
// c when c holds as many of them.
func preserveConditions(c, old *csr, t certificatesv1.RequestConditionType) {
	newAt, oldAt := conditionIndices(c, t), conditionIndices(old, t)
	if len(newAt) != len(oldAt) {
		return
	}
	for i, j := range oldAt {
		c.Status.Conditions[newAt[i]] = *old.Status.Conditions[j].DeepCopy()
	}
}

// conditionIndices returns where c's conditions of type t are.
func conditionIndices(c *csr, t certificatesv1.RequestConditionType) []int {
	var at []int
	for i, cond := range c.Status.Conditions {
		if cond.Type == t {
			at = append(at, i)
		}
	}
	return at
}

// stampConditions sets lastUpdateTime to now where it is unset, and
// lastTransitionTime where unset to that of a stored condition of the
// same type and status, or else to now, as upstream does.
func stampConditions(conds, old []certificatesv1.CertificateSigningRequestCondition, now time.Time) {
	t := metav1.NewTime(now)
	for i := range conds {
		c := &conds[i]
		if c.LastUpdateTime.IsZero() {
			c.LastUpdateTime = t
		}
		if !c.LastTransitionTime.IsZero() {
			continue
		}
		c.LastTransitionTime = t
		for _, o := range old {
			if o.Type == c.Type && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
				c.LastTransitionTime = o.LastTransitionTime
				break
			}
		}
	}
}

// csrColumns are upstream's: NAME AGE SIGNERNAME REQUESTOR
// REQUESTEDDURATION CONDITION.
func csrColumns() []metav1.TableColumnDefinition {
	spec := certificatesv1.CertificateSigningRequestSpec{}.SwaggerDoc()
	return []metav1.TableColumnDefinition{
		typed.NameColumn,
		typed.AgeColumn,
		{Name: "SignerName", Type: "string", Description: spec["signerName"]},
		{Name: "Requestor", Type: "string", Description: spec["request"]},
		{Name: "RequestedDuration", Type: "string", Description: spec["expirationSeconds"]},
		{Name: "Condition", Type: "string", Description: certificatesv1.CertificateSigningRequestStatus{}.SwaggerDoc()["conditions"]},
	}
}

func csrRow(c *csr, now time.Time) []interface{} {
	signer := "<none>"
	if c.Spec.SignerName != "" {
		signer = c.Spec.SignerName
	}
	requested := "<none>"
	if c.Spec.ExpirationSeconds != nil {
		requested = duration.HumanDuration(time.Duration(*c.Spec.ExpirationSeconds) * time.Second)
	}
	return []interface{}{c.Name, typed.Age(now, c.CreationTimestamp), signer, c.Spec.Username, requested, conditionCell(c)}
}

// conditionCell is the CONDITION column: Denied, Approved or Pending, then
// ",Failed" and ",Issued" where they apply.
func conditionCell(c *csr) string {
	var approved, denied, failed bool
	for _, cond := range c.Status.Conditions {
		switch cond.Type {
		case certificatesv1.CertificateApproved:
			approved = true
		case certificatesv1.CertificateDenied:
			denied = true
		case certificatesv1.CertificateFailed:
			failed = true
		}
	}
	s := "Pending"
	switch {
	case denied:
		s = "Denied"
	case approved:
		s = "Approved"
	}
	if failed {
		s += ",Failed"
	}
	if len(c.Status.Certificate) > 0 {
		s += ",Issued"
	}
	return s
}
