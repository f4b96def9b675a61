package admissionregistration

import (
	"fmt"
	"net/url"
	"strings"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateWebhookURL checks a webhook's url as upstream does: https,
// with a host, and no user, query or fragment.
func validateWebhookURL(p *field.Path, raw string, forceHTTPS bool) field.ErrorList {
	const form = "; desired format: https://host[/path]"
	u, err := url.Parse(raw)
	if err != nil {
		return field.ErrorList{field.Required(p, "url must be a valid URL: "+err.Error()+form)}
	}
	var errs field.ErrorList
	if forceHTTPS && u.Scheme != "https" {
		errs = append(errs, field.Invalid(p, u.Scheme, "'https' is the only allowed URL scheme"+form))
	}
	if u.Host == "" {
		errs = append(errs, field.Invalid(p, u.Host, "host must be specified"+form))
	}
	if u.User != nil {
		errs = append(errs, field.Invalid(p, u.User.String(), "user information is not permitted in the URL"))
	}
	if u.Fragment != "" {
		errs = append(errs, field.Invalid(p, u.Fragment, "fragments are not permitted in the URL"))
	}
	if u.RawQuery != "" {
		errs = append(errs, field.Invalid(p, u.RawQuery, "query parameters are not permitted in the URL"))
	}
	return errs
}

// validateWebhookService checks a webhook's service reference as
// upstream does: a name, a namespace, a valid port, and a path of DNS
// subdomain segments.
func validateWebhookService(p *field.Path, name, namespace string, urlPath *string, port int32) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	if namespace == "" {
		errs = append(errs, field.Required(p.Child("namespace"), ""))
	}
	if msgs := utilvalidation.IsValidPortNum(int(port)); msgs != nil {
		errs = append(errs, field.Invalid(p.Child("port"), port, "port is not valid: "+strings.Join(msgs, ", ")))
	}
	if urlPath == nil || *urlPath == "/" || *urlPath == "" {
		return errs
	}
	path := *urlPath
	if path == "//" {
		return append(errs, field.Invalid(p.Child("path"), path, "segment[0] may not be empty"))
	}
	if !strings.HasPrefix(path, "/") {
		errs = append(errs, field.Invalid(p.Child("path"), path, "must start with a '/'"))
	}
	check := strings.TrimSuffix(path[1:], "/")
	for i, step := range strings.Split(check, "/") {
		if step == "" {
			errs = append(errs, field.Invalid(p.Child("path"), path, fmt.Sprintf("segment[%d] may not be empty", i)))
			continue
		}
		for _, msg := range utilvalidation.IsDNS1123Subdomain(step) {
			errs = append(errs, field.Invalid(p.Child("path"), path, fmt.Sprintf("segment[%d]: %v", i, msg)))
		}
	}
	return errs
}
