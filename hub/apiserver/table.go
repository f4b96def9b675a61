package apiserver

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// table converts an object or a list of the request's resource into a
// meta.k8s.io/v1 Table with the resource's columns. includeObject selects
// what each row carries: None, Metadata (the default) or Object.
func (q *request) table(obj runtime.Object) (runtime.Object, error) {
	include := metav1.IncludeMetadata
	switch v := q.r.URL.Query().Get("includeObject"); v {
	case "":
	case string(metav1.IncludeNone), string(metav1.IncludeMetadata), string(metav1.IncludeObject):
		include = metav1.IncludeObjectPolicy(v)
	default:
		return nil, apierrors.NewBadRequest("includeObject must be None, Metadata or Object")
	}
	t := &metav1.Table{
		TypeMeta:          metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"},
		ColumnDefinitions: q.res.Rules.Columns(),
	}
	items := []runtime.Object{obj}
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		lm, _ := meta.ListAccessor(obj)
		t.ResourceVersion, t.Continue = lm.GetResourceVersion(), lm.GetContinue()
		t.RemainingItemCount = lm.GetRemainingItemCount()
	} else if m, err := meta.Accessor(obj); err == nil {
		t.ResourceVersion = m.GetResourceVersion()
	}
	t.Rows = make([]metav1.TableRow, 0, len(items))
	for _, item := range items {
		row := metav1.TableRow{Cells: q.res.Rules.Row(item)}
		switch include {
		case metav1.IncludeMetadata:
			row.Object.Object = partialMetadata(item)
		case metav1.IncludeObject:
			item.GetObjectKind().SetGroupVersionKind(q.res.gvk)
			row.Object.Object = item
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}
