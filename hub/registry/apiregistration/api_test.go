package apiregistration_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/outpost-mesh/outpost/hub/registry/apiregistration"
	"github.com/outpost-mesh/outpost/hub/registry/typed/typedtest"
	"github.com/outpost-mesh/outpost/test/hubtest"
)

// TestAPIServiceAPI: a started hub serves apiservices in discovery, has
// a local, Available APIService for its own groups, refuses what
// upstream refuses, and prints upstream's columns.
func TestAPIServiceAPI(t *testing.T) {
	h := hubtest.Start(t)
	ctx := context.Background()
	ac, err := aggregatorclient.NewForConfig(h.Config)
	if err != nil {
		t.Fatal(err)
	}
	apis := ac.ApiregistrationV1().APIServices()

	list, err := h.Client.Discovery().ServerResourcesForGroupVersion("apiregistration.k8s.io/v1")
	if err != nil || len(list.APIResources) != 2 || list.APIResources[0].Name != "apiservices" || list.APIResources[0].Namespaced ||
		list.APIResources[1].Name != "apiservices/status" {
		t.Errorf("discovery of apiregistration.k8s.io/v1 = %+v, %v; want cluster-scoped apiservices and their status", list, err)
	}

	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := apis.Get(ctx, "v1.apps", metav1.GetOptions{})
		return err == nil && apiregistration.IsAvailable(s) && s.Spec.Service == nil, nil
	})
	if err != nil {
		t.Errorf("local apiservice v1.apps not Available: %v", err)
	}

	s, err := apis.Create(ctx, &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.example.com"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "metrics.example.com", Version: "v1beta1", GroupPriorityMinimum: 100, VersionPriority: 100,
			Service: &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics"}, InsecureSkipTLSVerify: true},
		Status: apiregistrationv1.APIServiceStatus{Conditions: []apiregistrationv1.APIServiceCondition{{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionTrue}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create apiservice: %v", err)
	}
	if *s.Spec.Service.Port != 443 || apiregistration.IsAvailable(s) {
		t.Errorf("created apiservice: port %d, status %+v; want 443 and no status of the client's", *s.Spec.Service.Port, s.Status)
	}
	// The aggregator writes the new apiservice's status meanwhile: the
	// update is made again on a conflict, as any client of a controlled
	// object must.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := apis.Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.CABundle = []byte("-----BEGIN CERTIFICATE-----")
		_, err = apis.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if got := typedtest.Causes(t, "caBundle with insecureSkipTLSVerify", err); !slices.Contains(got, "spec.insecureSkipTLSVerify") {
		t.Errorf("caBundle with insecureSkipTLSVerify: causes %v, want spec.insecureSkipTLSVerify", got)
	}
	_, err = apis.Create(ctx, &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics"},
		Spec:       apiregistrationv1.APIServiceSpec{Group: "metrics.example.com", Version: "v1", GroupPriorityMinimum: 100, VersionPriority: 100},
	}, metav1.CreateOptions{})
	if got := typedtest.Causes(t, "create apiservice named metrics", err); !slices.Contains(got, "metadata.name") {
		t.Errorf("create apiservice named metrics: causes %v, want metadata.name", got)
	}

	tbl := typedtest.Table(t, ac.ApiregistrationV1().RESTClient(), "/apis/apiregistration.k8s.io/v1/apiservices")
	if names, want := typedtest.ColumnNames(tbl), []string{"Name", "Service", "Available", "Age"}; !reflect.DeepEqual(names, want) {
		t.Errorf("apiservices as a Table: columns %q, want %q", names, want)
	}
}
