package auth

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// The headers of impersonation, as kubectl --as, --as-group and --as-uid
// send them.
const (
	ImpersonateUserHeader        = "Impersonate-User"
	ImpersonateGroupHeader       = "Impersonate-Group"
	ImpersonateUIDHeader         = "Impersonate-Uid"
	ImpersonateExtraHeaderPrefix = "Impersonate-Extra-"
)

// ErrImpersonation is wrapped by the errors Impersonation returns for
// headers that do not make a request to impersonate someone: the request
// is then refused with 400 Bad Request.
var ErrImpersonation = errors.New("bad impersonation")

// Impersonation is whom a request asks to act as.
type Impersonation struct {
	User User
	// Checks are the requests the impersonating user must be allowed,
	// verb "impersonate", one per thing impersonated: the user (or
	// service account), each group, each extra value and the UID.
	Checks []Attributes
}

// ImpersonationOf returns whom the impersonation headers of h ask to act
// as, and false when they ask for nothing, as upstream's impersonation
// filter reads them: groups, extras and a UID only with a user; a
// service account user gets its groups unless groups are given; every
// impersonated user but system:anonymous is in system:authenticated.
func ImpersonationOf(h http.Header) (Impersonation, bool, error) {
	name := h.Get(ImpersonateUserHeader)
	groups := h.Values(ImpersonateGroupHeader)
	uid := h.Get(ImpersonateUIDHeader)
	extra := map[string][]string{}
	for k, vs := range h {
		key, ok := strings.CutPrefix(k, ImpersonateExtraHeaderPrefix)
		if !ok || len(key) == 0 {
			continue
		}
		// Extra keys are sent escaped and case-folded by HTTP.
		unescaped, err := url.PathUnescape(key)
		if err != nil {
			return Impersonation{}, false, fmt.Errorf("%w: extra key %q: %v", ErrImpersonation, key, err)
		}
		extra[strings.ToLower(unescaped)] = append(extra[strings.ToLower(unescaped)], vs...)
	}
	if name == "" {
		if len(groups) > 0 || uid != "" || len(extra) > 0 {
			return Impersonation{}, false, fmt.Errorf("%w: requested %v without impersonating a user", ErrImpersonation, requested(groups, uid, extra))
		}
		return Impersonation{}, false, nil
	}
	var imp Impersonation
	u := User{Name: name, UID: uid}
	if ns, sa, ok := strings.Cut(strings.TrimPrefix(name, ServiceAccountUserPrefix), ":"); strings.HasPrefix(name, ServiceAccountUserPrefix) && ok {
		imp.Checks = append(imp.Checks, Attributes{ResourceRequest: true, Verb: "impersonate", Resource: "serviceaccounts", Namespace: ns, Name: sa})
		if len(groups) == 0 {
			u.Groups = []string{ServiceAccountsGroup, ServiceAccountGroupPrefix + ns}
		}
	} else {
		imp.Checks = append(imp.Checks, Attributes{ResourceRequest: true, Verb: "impersonate", Resource: "users", Name: name})
	}
	for _, g := range groups {
		imp.Checks = append(imp.Checks, Attributes{ResourceRequest: true, Verb: "impersonate", Resource: "groups", Name: g})
		u.Groups = append(u.Groups, g)
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range extra[k] {
			imp.Checks = append(imp.Checks, Attributes{ResourceRequest: true, Verb: "impersonate", APIGroup: "authentication.k8s.io", Resource: "userextras", Subresource: k, Name: v})
		}
	}
	if len(extra) > 0 {
		u.Extra = extra
	}
	if uid != "" {
		imp.Checks = append(imp.Checks, Attributes{ResourceRequest: true, Verb: "impersonate", APIGroup: "authentication.k8s.io", Resource: "uids", Name: uid})
	}
	switch {
	case name == AnonymousUser:
		if !slices.Contains(u.Groups, UnauthenticatedGroup) {
			u.Groups = append(u.Groups, UnauthenticatedGroup)
		}
	case !slices.Contains(u.Groups, AuthenticatedGroup):
		u.Groups = append(u.Groups, AuthenticatedGroup)
	}
	imp.User = u
	return imp, true, nil
}

func requested(groups []string, uid string, extra map[string][]string) []string {
	var r []string
	for _, g := range groups {
		r = append(r, ImpersonateGroupHeader+": "+g)
	}
	if uid != "" {
		r = append(r, ImpersonateUIDHeader+": "+uid)
	}
	for k := range extra {
		r = append(r, ImpersonateExtraHeaderPrefix+k)
	}
	return r
}

// RemoveImpersonation deletes the impersonation headers from h, once
// served: what serves the request then sees only the user it acts as.
func RemoveImpersonation(h http.Header) {
	for k := range h {
		if k == ImpersonateUserHeader || k == ImpersonateGroupHeader || k == ImpersonateUIDHeader || strings.HasPrefix(k, ImpersonateExtraHeaderPrefix) {
			h.Del(k)
		}
	}
}
