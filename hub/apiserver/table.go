package apiserver

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// table converts one object of the request's resource into a
// meta.k8s.io/v1 Table with the resource's columns. includeObject selects
// what its row carries: None, Metadata (the default) or Object. Lists are
// written row by row instead (listForm).
func (q *request) table(obj runtime.Object) (runtime.Object, error) {
	include, err := q.includeObject()
	if err != nil {
		return nil, err
	}
	t := &metav1.Table{
		TypeMeta:          metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"},
		ColumnDefinitions: q.res.columns(),
	}
	if m, err := meta.Accessor(obj); err == nil {
		t.ResourceVersion = m.GetResourceVersion()
	}
	t.Rows = []metav1.TableRow{q.tableRow(obj, include)}
	return t, nil
}
