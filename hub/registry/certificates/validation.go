package certificates

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// LegacyUnknownSignerName is the signer certificates.k8s.io/v1beta1 gave
// requests that named none; v1 refuses it on create and tolerates it on
// objects that already have it.
const LegacyUnknownSignerName = "kubernetes.io/legacy-unknown"

var (
	metadataPath    = field.NewPath("metadata")
	specPath        = field.NewPath("spec")
	conditionsPath  = field.NewPath("status", "conditions")
	certificatePath = field.NewPath("status", "certificate")
)

// validUsages are the key usages a request may ask for, sorted as
// upstream lists them in a NotSupported error.
var validUsages = func() []string {
	u := []string{}
	for _, k := range []certificatesv1.KeyUsage{
		certificatesv1.UsageSigning, certificatesv1.UsageDigitalSignature, certificatesv1.UsageContentCommitment,
		certificatesv1.UsageKeyEncipherment, certificatesv1.UsageKeyAgreement, certificatesv1.UsageDataEncipherment,
		certificatesv1.UsageCertSign, certificatesv1.UsageCRLSign, certificatesv1.UsageEncipherOnly,
		certificatesv1.UsageDecipherOnly, certificatesv1.UsageAny, certificatesv1.UsageServerAuth,
		certificatesv1.UsageClientAuth, certificatesv1.UsageCodeSigning, certificatesv1.UsageEmailProtection,
		certificatesv1.UsageSMIME, certificatesv1.UsageIPsecEndSystem, certificatesv1.UsageIPsecTunnel,
		certificatesv1.UsageIPsecUser, certificatesv1.UsageTimestamping, certificatesv1.UsageOCSPSigning,
		certificatesv1.UsageMicrosoftSGC, certificatesv1.UsageNetscapeSGC,
	} {
		u = append(u, string(k))
	}
	slices.Sort(u)
	return u
}()

// trueOnlyConditions are the condition types whose status may only be
// True.
var trueOnlyConditions = []certificatesv1.RequestConditionType{
	certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed,
}

// options are what one validation tolerates: what only a subresource may
// change, and what v1 refuses in new objects but keeps accepting in
// objects that already have it (upstream's certificateValidationOptions).
type options struct {
	settingApproval      bool // conditions Approved and Denied may change (approval)
	settingCertificate   bool // status.certificate may be set (status)
	bothApprovedDenied   bool
	legacySigner         bool
	duplicateConditions  bool
	emptyConditionType   bool
	arbitraryCertificate bool
	unknownUsages        bool
	duplicateUsages      bool
}

// optionsFor returns the tolerances of a write of c over old (nil on
// create), as upstream's getValidationOptions.
func optionsFor(c, old *csr) options {
	if old == nil {
		return options{}
	}
	var approved, denied, empty bool
	seen := map[certificatesv1.RequestConditionType]bool{}
	o := options{}
	for _, cond := range old.Status.Conditions {
		approved = approved || cond.Type == certificatesv1.CertificateApproved
		denied = denied || cond.Type == certificatesv1.CertificateDenied
		empty = empty || cond.Type == ""
		o.duplicateConditions = o.duplicateConditions || seen[cond.Type]
		seen[cond.Type] = true
	}
	o.bothApprovedDenied = approved && denied
	o.emptyConditionType = empty
	o.legacySigner = old.Spec.SignerName == LegacyUnknownSignerName
	o.arbitraryCertificate = bytes.Equal(c.Status.Certificate, old.Status.Certificate) || checkCertificate(old.Status.Certificate) != nil
	usages := map[certificatesv1.KeyUsage]bool{}
	for _, u := range old.Spec.Usages {
		o.unknownUsages = o.unknownUsages || !slices.Contains(validUsages, string(u))
		o.duplicateUsages = o.duplicateUsages || usages[u]
		usages[u] = true
	}
	return o
}

// ParseRequest decodes a CSR's spec.request: the first PEM block, which
// must be a CERTIFICATE REQUEST, parsed as PKCS#10. Its errors are
// upstream's.
func ParseRequest(pemBytes []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

// checkRequest returns why spec.request is not a well-signed certificate
// request, or nil.
func checkRequest(pemBytes []byte) error {
	req, err := ParseRequest(pemBytes)
	if err != nil {
		return err
	}
	return req.CheckSignature()
}

// checkCertificate returns why status.certificate is not one or more PEM
// CERTIFICATE blocks, without headers, that parse; nil for none at all.
func checkCertificate(pemData []byte) error {
	if len(pemData) == 0 {
		return nil
	}
	blocks := 0
	for {
		block, rest := pem.Decode(pemData)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("only CERTIFICATE PEM blocks are allowed, found %q", block.Type)
		}
		if len(block.Headers) != 0 {
			return errors.New("no PEM block headers are permitted")
		}
		blocks++
		certs, err := x509.ParseCertificates(block.Bytes)
		if err != nil {
			return err
		}
		if len(certs) == 0 {
			return errors.New("found CERTIFICATE PEM block containing 0 certificates")
		}
		pemData = rest
	}
	if blocks == 0 {
		return errors.New("must contain at least one CERTIFICATE PEM block")
	}
	return nil
}

func validateCreate(c *csr) field.ErrorList { return validate(c, options{}) }

// validate checks c whole, with the tolerances o.
func validate(c *csr, o options) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&c.ObjectMeta, false, func(string, bool) []string { return nil }, metadataPath)
	if err := checkRequest(c.Spec.Request); err != nil {
		errs = append(errs, field.Invalid(specPath.Child("request"), c.Spec.Request, err.Error()))
	}
	errs = append(errs, validateUsages(c.Spec.Usages, o)...)
	if !o.legacySigner && c.Spec.SignerName == LegacyUnknownSignerName {
		errs = append(errs, field.Invalid(specPath.Child("signerName"), c.Spec.SignerName, "the legacy signerName is not allowed via this API version"))
	} else {
		errs = append(errs, ValidateSignerName(specPath.Child("signerName"), c.Spec.SignerName)...)
	}
	if e := c.Spec.ExpirationSeconds; e != nil && *e < 600 {
		errs = append(errs, field.Invalid(specPath.Child("expirationSeconds"), *e, "may not specify a duration less than 600 seconds (10 minutes)"))
	}
	errs = append(errs, validateConditions(c.Status.Conditions, o)...)
	if !o.arbitraryCertificate {
		if err := checkCertificate(c.Status.Certificate); err != nil {
			errs = append(errs, field.Invalid(certificatePath, "<certificate data>", err.Error()))
		}
	}
	return errs
}

func validateUsages(usages []certificatesv1.KeyUsage, o options) field.ErrorList {
	var errs field.ErrorList
	p := specPath.Child("usages")
	if len(usages) == 0 {
		errs = append(errs, field.Required(p, "usages must be provided"))
	}
	seen := map[certificatesv1.KeyUsage]bool{}
	for i, u := range usages {
		if !o.unknownUsages && !slices.Contains(validUsages, string(u)) {
			errs = append(errs, field.NotSupported(p.Index(i), u, validUsages))
		}
		if !o.duplicateUsages && seen[u] {
			errs = append(errs, field.Duplicate(p.Index(i), u))
		}
		seen[u] = true
	}
	return errs
}

func validateConditions(conds []certificatesv1.CertificateSigningRequestCondition, o options) field.ErrorList {
	var errs field.ErrorList
	seen := map[certificatesv1.RequestConditionType]bool{}
	var approved, denied bool
	for i, c := range conds {
		p := conditionsPath.Index(i)
		if !o.emptyConditionType && c.Type == "" {
			errs = append(errs, field.Required(p.Child("type"), ""))
		}
		allowed := []string{string(corev1.ConditionFalse), string(corev1.ConditionTrue), string(corev1.ConditionUnknown)}
		if slices.Contains(trueOnlyConditions, c.Type) {
			allowed = []string{string(corev1.ConditionTrue)}
		}
		switch {
		case c.Status == "":
			errs = append(errs, field.Required(p.Child("status"), ""))
		case !slices.Contains(allowed, string(c.Status)):
			errs = append(errs, field.NotSupported(p.Child("status"), c.Status, allowed))
		}
		if !o.bothApprovedDenied {
			switch c.Type {
			case certificatesv1.CertificateApproved:
				approved = true
				if denied {
					errs = append(errs, field.Invalid(p.Child("type"), c.Type, "Approved and Denied conditions are mutually exclusive"))
				}
			case certificatesv1.CertificateDenied:
				denied = true
				if approved {
					errs = append(errs, field.Invalid(p.Child("type"), c.Type, "Approved and Denied conditions are mutually exclusive"))
				}
			}
		}
		if !o.duplicateConditions && seen[c.Type] {
			errs = append(errs, field.Duplicate(p.Child("type"), c.Type))
		}
		seen[c.Type] = true
	}
	return errs
}

// ValidateSignerName checks that name is a signer name: a domain of at
// least two DNS labels, a slash, and a path of DNS subdomains separated by
// dots, 571 characters at most (a domain, a namespace and a resource
// name), with upstream's messages.
func ValidateSignerName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "signerName must be provided")}
	}
	segments := strings.Split(name, "/")
	if len(segments) != 2 {
		return field.ErrorList{field.Invalid(p, name, "must be a fully qualified domain and path of the form 'example.com/signer-name'")}
	}
	var errs field.ErrorList
	domain, path := segments[0], segments[1]
	if len(domain) > validation.DNS1123SubdomainMaxLength {
		errs = append(errs, field.TooLong(p, domain, validation.DNS1123SubdomainMaxLength))
	}
	labels := strings.Split(domain, ".")
	for _, l := range labels {
		if msgs := validation.IsDNS1123Label(l); len(msgs) > 0 {
			for _, m := range msgs {
				errs = append(errs, field.Invalid(p, domain, fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break // the other labels' errors would read the same
		}
	}
	if len(labels) < 2 {
		errs = append(errs, field.Invalid(p, domain, "should be a domain with at least two segments separated by dots"))
	}
	for _, l := range strings.Split(path, ".") {
		if msgs := validation.IsDNS1123Subdomain(l); len(msgs) > 0 {
			for _, m := range msgs {
				errs = append(errs, field.Invalid(p, path, fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break
		}
	}
	maxPath := validation.DNS1123SubdomainMaxLength + validation.DNS1123LabelMaxLength + 1
	if maxName := validation.DNS1123SubdomainMaxLength + maxPath + 1; len(name) > maxName {
		errs = append(errs, field.TooLong(p, name, maxName))
	}
	return errs
}

// validateUpdate checks an update of the main resource, which the
// preparation has already kept from changing spec and status.
func validateUpdate(c, old *csr) field.ErrorList {
	return validateUpdateWith(c, old, optionsFor(c, old))
}

// validateStatusUpdate checks an update of the status subresource, which
// may set the certificate.
func validateStatusUpdate(c, old *csr) field.ErrorList {
	o := optionsFor(c, old)
	o.settingCertificate = true
	return validateUpdateWith(c, old, o)
}

// validateApprovalUpdate checks an update of the approval subresource,
// which may add Approved and Denied conditions.
func validateApprovalUpdate(c, old *csr) field.ErrorList {
	o := optionsFor(c, old)
	o.settingApproval = true
	return validateUpdateWith(c, old, o)
}

// validateUpdateWith checks c replacing old with the tolerances o:
// Approved, Denied and Failed conditions are never removed; Approved and
// Denied change only through approval; the certificate is set only
// through status, and only once.
func validateUpdateWith(c, old *csr, o options) field.ErrorList {
	errs := validate(c, o)
	errs = append(errs, apivalidation.ValidateObjectMetaUpdate(&c.ObjectMeta, &old.ObjectMeta, metadataPath)...)
	for _, t := range trueOnlyConditions {
		if len(conditionsOf(c, t)) < len(conditionsOf(old, t)) {
			errs = append(errs, field.Forbidden(conditionsPath, fmt.Sprintf("updates may not remove a condition of type %q", t)))
		}
	}
	if !o.settingApproval {
		for _, t := range []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied} {
			was, is := conditionsOf(old, t), conditionsOf(c, t)
			switch {
			case len(is) < len(was): // refused above
			case len(is) > len(was):
				errs = append(errs, field.Forbidden(conditionsPath, fmt.Sprintf("updates may not add a condition of type %q", t)))
			case !apiequality.Semantic.DeepEqual(was, is):
				errs = append(errs, field.Forbidden(conditionsPath, fmt.Sprintf("updates may not modify a condition of type %q", t)))
			}
		}
	}
	if !bytes.Equal(c.Status.Certificate, old.Status.Certificate) {
		if !o.settingCertificate {
			errs = append(errs, field.Forbidden(certificatePath, "updates may not set certificate content"))
		} else if len(old.Status.Certificate) > 0 {
			errs = append(errs, field.Forbidden(certificatePath, "updates may not modify existing certificate content"))
		}
	}
	return errs
}

// conditionsOf returns c's conditions of type t.
func conditionsOf(c *csr, t certificatesv1.RequestConditionType) []certificatesv1.CertificateSigningRequestCondition {
	var out []certificatesv1.CertificateSigningRequestCondition
	for _, cond := range c.Status.Conditions {
		if cond.Type == t {
			out = append(out, cond)
		}
	}
	return out
}
