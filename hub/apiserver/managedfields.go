package apiserver

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/applyconfigurations"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Field management keeps metadata.managedFields as upstream does: which
// manager set which field, by an apply or an update, through the
// machinery of k8s.io/apimachinery/pkg/util/managedfields. Every write of
// an object records its manager (the fieldManager parameter, or the
// first part of the User-Agent); server-side apply (apply.go) merges by
// the same records. Upstream's library keeps at most ten update managers
// per object, merging the oldest into "ancient-changes", so the records
// grow with the distinct appliers of an object, not with its writes.

// trackedSubresources are the subresources whose writes record their
// manager, each with its own field manager as upstream; writes through
// the others (binding, eviction) leave managedFields as they are.
var trackedSubresources = map[string]bool{"": true, "status": true, "scale": true, "finalize": true}

// fieldTracker holds one resource's field managers, one per tracked
// subresource, made on first use: the schema of k8s.io/api they read is
// large, and a hub that is never written to need not build it. Its
// methods are safe for concurrent use.
type fieldTracker struct {
	res    *resourceInfo
	scheme *runtime.Scheme
	// builtin returns the schema of k8s.io/api's types, built once for
	// all of a server's resources.
	builtin func() managedfields.TypeConverter

	mu       sync.Mutex
	managers map[string]*managedfields.FieldManager
}

func newFieldTracker(res *resourceInfo, scheme *runtime.Scheme, builtin func() managedfields.TypeConverter) *fieldTracker {
	return &fieldTracker{res: res, scheme: scheme, builtin: builtin, managers: map[string]*managedfields.FieldManager{}}
}

// builtinTypes returns a function that builds, once, the schema of the
// k8s.io/api types scheme knows: large (tens of MB to build), so made on
// the first write that needs it and shared by every resource.
func builtinTypes(scheme *runtime.Scheme) func() managedfields.TypeConverter {
	return sync.OnceValue(func() managedfields.TypeConverter { return applyconfigurations.NewTypeConverter(scheme) })
}

// typeConverter returns the schema the resource's objects merge by:
// Resource.TypeConverter, else that of k8s.io/api for Go types, else one
// deduced from each object, as upstream has for custom resources
// without a schema.
func (t *fieldTracker) typeConverter() managedfields.TypeConverter {
	switch {
	case t.res.TypeConverter != nil:
		return t.res.TypeConverter
	case t.res.Encoding == EncodingProtobuf:
		return t.builtin()
	default:
		return managedfields.NewDeducedTypeConverter()
	}
}

// tracks reports whether writes of subresource record their manager:
// those of trackedSubresources and of the resource's own Subresources.
func (r *resourceInfo) tracks(subresource string) bool {
	return trackedSubresources[subresource] || r.subresource(subresource) != nil
}

// manager returns the field manager of subresource, which must be one the
// resource tracks.
func (t *fieldTracker) manager(subresource string) (*managedfields.FieldManager, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fm := t.managers[subresource]; fm != nil {
		return fm, nil
	}
	// Fields a write of the subresource cannot change are not its
	// manager's, as upstream's strategies declare with their reset
	// fields: status for the main resource; for status all but status
	// and metadata, or all but status where status writes keep the
	// metadata (see Resource.StatusKeepsMetadata).
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	apiVersion := fieldpath.APIVersion(t.res.GroupVersion.String())
	switch {
	case subresource == "" && t.res.Status:
		reset = map[fieldpath.APIVersion]fieldpath.Filter{apiVersion: fieldpath.NewExcludeSetFilter(fieldpath.NewSet(fieldpath.MakePathOrDie("status")))}
	case subresource == "status" && t.res.StatusKeepsMetadata:
		reset = map[fieldpath.APIVersion]fieldpath.Filter{apiVersion: fieldpath.NewIncludeMatcherFilter(fieldpath.MakePrefixMatcherOrDie("status"))}
	case subresource == "status":
		reset = map[fieldpath.APIVersion]fieldpath.Filter{apiVersion: fieldpath.NewIncludeMatcherFilter(
			fieldpath.MakePrefixMatcherOrDie("status"), fieldpath.MakePrefixMatcherOrDie("metadata"))}
	}
	newManager := managedfields.NewDefaultFieldManager
	if t.res.Encoding == EncodingJSON {
		newManager = managedfields.NewDefaultCRDFieldManager
	}
	conv := oneVersion{scheme: t.scheme, res: t.res}
	fm, err := newManager(t.typeConverter(), conv, conv, conv, t.res.gvk, t.res.GroupVersion, subresource, reset)
	if err != nil {
		return nil, err
	}
	t.managers[subresource] = fm
	return fm, nil
}

// oneVersion is the object converter, defaulter and creater the field
// managers of one resource use. They convert between the resource's
// version and, for a resource with a Conversion, its storage version,
// whose managers' entries the stored object carries too: objects are
// copied (and, for Go types, turned from unstructured into their type)
// or converted as the store converts them; any other version is refused,
// as upstream's CRD handler refuses versions a CRD does not serve.
type oneVersion struct {
	scheme *runtime.Scheme
	res    *resourceInfo
}

var (
	_ runtime.ObjectConvertor = oneVersion{}
	_ runtime.ObjectDefaulter = oneVersion{}
	_ runtime.ObjectCreater   = oneVersion{}
)

func (c oneVersion) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	kinds := []schema.GroupVersionKind{c.res.gvk}
	if c.res.Conversion != nil {
		kinds = append(kinds, c.res.storageGVK())
	}
	gvk, ok := target.KindForGroupVersionKinds(kinds)
	if !ok || !slices.Contains(kinds, gvk) {
		return nil, fmt.Errorf("%s is served in %s only", c.res.gvk.Kind, c.res.GroupVersion)
	}
	have := in.GetObjectKind().GroupVersionKind()
	if have.Empty() {
		have = c.res.gvk
	}
	if !slices.Contains(kinds, have) {
		return nil, fmt.Errorf("%s is served in %s only, not as %s", c.res.gvk.Kind, c.res.GroupVersion, have)
	}
	var out runtime.Object
	var err error
	switch {
	case have != gvk && gvk == c.res.gvk: // from the storage version
		out, err = c.fromStorage(in)
	case have != gvk:
		out, err = c.res.toStorage(in)
	case c.res.Encoding == EncodingJSON:
		out = in.DeepCopyObject()
	default:
		return c.scheme.ConvertToVersion(in, gvk.GroupVersion())
	}
	if err != nil {
		return nil, err
	}
	out.GetObjectKind().SetGroupVersionKind(gvk)
	return out, nil
}

// fromStorage converts in, of the storage version, to the resource's.
func (c oneVersion) fromStorage(in runtime.Object) (runtime.Object, error) {
	if conv := c.res.Conversion.FromStorage; conv != nil {
		return conv(in)
	}
	return in.DeepCopyObject(), nil
}

func (c oneVersion) Convert(in, out, context interface{}) error {
	return fmt.Errorf("%s is served in %s only: no conversion", c.res.gvk.Kind, c.res.GroupVersion)
}

func (c oneVersion) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

// Default applies the resource's defaults to an applied object, as
// upstream's decoding does to every object.
func (c oneVersion) Default(obj runtime.Object) { c.res.setDefaults(obj) }

// New returns an empty object of the resource, what an apply of a
// missing object starts from.
func (c oneVersion) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	if kind != c.res.gvk {
		return nil, fmt.Errorf("%s is served in %s only, not as %s", c.res.gvk.Kind, c.res.GroupVersion, kind)
	}
	obj := c.res.New()
	obj.GetObjectKind().SetGroupVersionKind(kind)
	return obj, nil
}

// fieldOptions are a request's field-management options.
type fieldOptions struct {
	// parsed is set once the options below were read from the query.
	parsed bool
	// manager names who makes the write: the fieldManager parameter, or
	// what upstream makes of the User-Agent when there is none.
	manager string
	// apply is set for a server-side apply, whose mutate has merged the
	// object and its managedFields already; force is its force parameter.
	apply bool
	force bool
}

// fieldOptions reads and checks the request's field-management options,
// once; an apply must name its manager. Errors are upstream's: 400 for
// a parameter that does not parse, 422 for one that is invalid.
func (q *request) fieldOptions() (*fieldOptions, error) {
	o := &q.fields
	if o.parsed {
		return o, nil
	}
	query := q.r.URL.Query()
	o.manager = query.Get("fieldManager")
	var force *bool
	if v, ok := query["force"]; ok && len(v) > 0 {
		b, err := parseBool(v[0])
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("force %q is not a boolean", truncate([]byte(v[0]), 64)))
		}
		force = &b
	}
	var errs field.ErrorList
	kind := "UpdateOptions"
	switch {
	case q.verb == "patch":
		kind = "PatchOptions"
		pt := types.PatchType("")
		if o.apply {
			pt = types.ApplyYAMLPatchType
		}
		errs = metav1validation.ValidatePatchOptions(&metav1.PatchOptions{FieldManager: o.manager, Force: force}, pt)
	case q.verb == "create" && q.ri.subresource == "":
		kind = "CreateOptions"
		errs = metav1validation.ValidateFieldManager(o.manager, field.NewPath("fieldManager"))
	default:
		errs = metav1validation.ValidateFieldManager(o.manager, field.NewPath("fieldManager"))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
	}
	if o.manager == "" {
		o.manager = managerFromUserAgent(q.r.UserAgent())
	}
	o.force = force != nil && *force
	o.parsed = true
	return o, nil
}

func parseBool(s string) (bool, error) {
	switch s {
	case "true", "True", "TRUE", "1", "t", "T":
		return true, nil
	case "false", "False", "FALSE", "0", "f", "F", "":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: %q", s)
}

// managerFromUserAgent is upstream's manager for a write without a
// fieldManager: the User-Agent up to its first "/", printable characters
// only, at most FieldManagerMaxLength bytes; e.g. kubectl-edit for
// "kubectl-edit/v1.33.0 (linux/amd64) kubernetes/abc".
func managerFromUserAgent(ua string) string {
	var b []byte
	for _, r := range ua {
		if r == '/' {
			break
		}
		if !unicode.IsPrint(r) {
			continue
		}
		if len(b)+len(string(r)) > metav1validation.FieldManagerMaxLength {
			break
		}
		b = append(b, string(r)...)
	}
	return string(b)
}

// trackCreate records the request's manager as the owner of the fields
// of obj, an object about to be created, as upstream does before its
// create rules run; it returns the object to create. The managedFields a
// client sends are kept when they are valid and not empty, and [] or
// [{}] clears them, as upstream. obj of an apply carries its
// managedFields already.
func (q *request) trackCreate(obj runtime.Object) (runtime.Object, error) {
	o, err := q.fieldOptions()
	if err != nil {
		return nil, err
	}
	if o.apply {
		q.retime(obj, nil)
		return obj, nil
	}
	fm, err := q.res.fields.manager("")
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	live, err := oneVersion{res: q.res}.New(q.res.gvk)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	q.res.setDefaults(obj) // upstream's decoding defaults before it tracks
	obj = fm.UpdateNoErrors(live, obj, o.manager)
	q.retime(obj, nil)
	return obj, nil
}

// trackUpdate records the request's manager as the owner of the fields
// that obj, prepared to replace old, changes, and returns the object to
// write. sent are the managedFields obj had before it was prepared: those
// the client sent, or for an apply those the apply merged. Writes of
// subresources that are not tracked keep old's managedFields.
func (q *request) trackUpdate(obj, old runtime.Object, sent []metav1.ManagedFieldsEntry, kind updateKind) (runtime.Object, error) {
	o, err := q.fieldOptions()
	if err != nil {
		return nil, err
	}
	if kind == updateBinding || !q.res.tracks(q.ri.subresource) {
		om(obj).SetManagedFields(om(old).GetManagedFields())
		return obj, nil
	}
	om(obj).SetManagedFields(sent)
	if !o.apply {
		fm, err := q.res.fields.manager(q.ri.subresource)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		obj = fm.UpdateNoErrors(old, obj, o.manager)
	}
	q.retime(obj, old)
	keepTimesOfNoop(obj, old)
	return obj, nil
}

// retime sets the time of the request's manager's entry in obj's
// managedFields, where the library has just set it from the wall clock,
// to the server's clock (Config.Now), as the API's other timestamps.
// old is the object replaced, or nil. (The library compares its wall
// clock time with the recorded ones when it merges the oldest update
// managers, so a server clock far from the wall clock skews which are
// oldest; Config.Now is the wall clock but in tests.)
func (q *request) retime(obj, old runtime.Object) {
	m := om(obj)
	entries := m.GetManagedFields()
	var before []metav1.ManagedFieldsEntry
	if old != nil {
		before = om(old).GetManagedFields()
	}
	now := metav1.NewTime(q.s.now().UTC().Truncate(time.Second))
	changed := false
	for i := range entries {
		e := &entries[i]
		if e.Manager != q.fields.manager || e.Subresource != q.ri.subresource {
			continue
		}
		if j := findEntry(before, e); j >= 0 && before[j].Time.Equal(e.Time) {
			continue // the library left it
		}
		e.Time = now.DeepCopy()
		changed = true
	}
	if changed {
		sortEntries(entries)
		m.SetManagedFields(entries)
	}
}

// sortEntries sorts managedFields entries as the library does when it
// writes them (by operation, time, manager, apiVersion, subresource), so
// that entries retimed here are where the next write would put them: a
// later write that changes nothing then encodes the same.
func sortEntries(entries []metav1.ManagedFieldsEntry) {
	slices.SortStableFunc(entries, func(p, q metav1.ManagedFieldsEntry) int {
		var ps, qs int64
		if p.Time != nil {
			ps = p.Time.Unix()
		}
		if q.Time != nil {
			qs = q.Time.Unix()
		}
		return cmp.Or(cmp.Compare(p.Operation, q.Operation), cmp.Compare(ps, qs),
			cmp.Compare(p.Manager, q.Manager), cmp.Compare(p.APIVersion, q.APIVersion), cmp.Compare(p.Subresource, q.Subresource))
	})
}

// findEntry returns the index of the entry of e's manager, operation,
// subresource and apiVersion in entries, or -1.
func findEntry(entries []metav1.ManagedFieldsEntry, e *metav1.ManagedFieldsEntry) int {
	for i, b := range entries {
		if b.Manager == e.Manager && b.Operation == e.Operation && b.Subresource == e.Subresource && b.APIVersion == e.APIVersion {
			return i
		}
	}
	return -1
}

// keepTimesOfNoop gives obj the managedFields times of old when they
// are all obj changes: an apply that changes nothing then writes
// nothing, no new resourceVersion and no watch event, as upstream.
func keepTimesOfNoop(obj, old runtime.Object) {
	m, mo := om(obj), om(old)
	entries, before := m.GetManagedFields(), mo.GetManagedFields()
	if len(entries) != len(before) || len(entries) == 0 {
		return
	}
	same := true
	for i := range entries {
		a, b := entries[i], before[i]
		if !a.Time.Equal(b.Time) {
			same = false
		}
		a.Time, b.Time = nil, nil
		if !reflect.DeepEqual(a, b) {
			return
		}
	}
	if same {
		return
	}
	m.SetManagedFields(slices.Clone(before))
	if !equality.Semantic.DeepEqual(obj, old) {
		m.SetManagedFields(entries)
	}
}
