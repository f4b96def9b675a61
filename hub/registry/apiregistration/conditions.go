package apiregistration

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// Available returns s's Available condition, a pointer into s, or nil
// when it has none.
func Available(s *apiregistrationv1.APIService) *apiregistrationv1.APIServiceCondition {
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == apiregistrationv1.Available {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

// IsAvailable reports whether s's Available condition is True.
func IsAvailable(s *apiregistrationv1.APIService) bool {
	c := Available(s)
	return c != nil && c.Status == apiregistrationv1.ConditionTrue
}

// LocalAvailable returns the Available condition of a local APIService,
// as upstream words it, without its transition time.
func LocalAvailable() apiregistrationv1.APIServiceCondition {
	return apiregistrationv1.APIServiceCondition{
		Type:    apiregistrationv1.Available,
		Status:  apiregistrationv1.ConditionTrue,
		Reason:  ReasonLocal,
		Message: localMessage,
	}
}

// SetAvailable sets s's Available condition to c; its transition time
// becomes now if the status changed (or there was none), and stays
// otherwise, as upstream's SetAPIServiceCondition keeps it. It reports
// whether anything changed.
func SetAvailable(s *apiregistrationv1.APIService, c apiregistrationv1.APIServiceCondition, now time.Time) bool {
	c.Type = apiregistrationv1.Available
	old := Available(s)
	if old == nil {
		c.LastTransitionTime = metav1.NewTime(now)
		s.Status.Conditions = append(s.Status.Conditions, c)
		return true
	}
	if old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	} else {
		c.LastTransitionTime = metav1.NewTime(now)
	}
	if *old == c {
		return false
	}
	*old = c
	return true
}
