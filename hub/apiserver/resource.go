package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Resource describes one served resource: its names and the rules it
// contributes. Everything else (metadata, resourceVersion, CRUD, list,
// watch, patch, Table, errors) is the generic machinery's.
type Resource struct {
	GroupVersion schema.GroupVersion
	Kind         string   // "Pod"
	Plural       string   // "pods"
	Singular     string   // "pod"
	ShortNames   []string // "po"
	Categories   []string // "all"
	Namespaced   bool
	// New and NewList return empty objects of the resource's Go types,
	// e.g. &corev1.Pod{} and &corev1.PodList{}.
	New     func() runtime.Object
	NewList func() runtime.Object
	// AddToScheme registers New's and NewList's Go types with the
	// server's scheme, e.g. k8s.io/api/core/v1's AddToScheme; nil for a
	// resource whose objects are *unstructured.Unstructured, which carry
	// their kind themselves. Resources of one group may share one.
	AddToScheme func(*runtime.Scheme) error
	// Encoding is how the resource's objects are stored and which
	// media types clients may use for them; the zero value is protobuf,
	// for the Go types of k8s.io/api.
	Encoding Encoding
	// TypeConverter is the schema server-side apply and managedFields
	// merge the resource's objects by: which lists are maps keyed by
	// which fields, which fields are atomic. Nil means that of k8s.io/api
	// for EncodingProtobuf, and one deduced from each object for
	// EncodingJSON (as upstream for custom resources without a schema).
	TypeConverter managedfields.TypeConverter
	// Status serves the status subresource: PUT and PATCH there change the
	// object's Status field and its labels, annotations, owner references
	// and finalizers (as upstream's built-in status strategies, which
	// reset only the spec), and updates of the main resource keep the
	// stored Status.
	Status bool
	// StatusKeepsMetadata makes status updates keep the stored metadata
	// too, changing the Status field alone, as upstream's status strategies
	// of custom resources and of flowcontrol objects do.
	StatusKeepsMetadata bool
	// Generation makes metadata.generation count changes of everything but
	// metadata and status (1 on create), as upstream does for workloads.
	Generation bool
	// DefaultOnRead applies the rules' defaults (see Defaulter) to every
	// object read from the store too, as upstream defaults what it decodes
	// from etcd. Resources whose defaults can change while their objects
	// are stored need it: a CRD's schema may gain a default. Built-in
	// types' defaults change only with the hub, and the hub stored every
	// object with them, so their reads skip the cost.
	DefaultOnRead bool
	// Scale serves the scale subresource (autoscaling/v1 Scale), or nil.
	Scale *ScaleRules
	// Token serves the token subresource (a create of an
	// authentication.k8s.io/v1 TokenRequest) with Config.Tokens, or nil;
	// only service accounts have one.
	Token *TokenRules
	// Rules are the resource's defaults, validation, fields and columns.
	Rules Rules
	// Creator, when set, serves the resource create-only, its objects
	// answered and never stored (see Creator); Rules and Reader must then
	// be nil, and Status, Scale and Token unset.
	Creator Creator
	// Reader, when set, serves the resource read-only from elsewhere
	// than the store (see Reader); Rules may then be nil, and Status,
	// Scale and Token must be unset.
	Reader Reader
	// Conversion, when set, makes the resource a version served of
	// objects stored at another version of its group and kind, as
	// upstream serves autoscaling/v1 HorizontalPodAutoscalers stored as
	// autoscaling/v2, and a custom resource's versions stored at its
	// storage version.
	Conversion *Conversion
	// Subresources are further subresources that, like status, update
	// part of the stored object (certificatesigningrequests/approval).
	Subresources []Subresource
}

// Subresource is an update-only subresource of part of an object: GET,
// PUT and PATCH at its path read and write the whole object, of which
// only what Update takes from the request is stored.
type Subresource struct {
	// Name is the subresource's path element, e.g. "approval".
	Name string
	// Update changes old, a copy of the stored object the machinery owns,
	// with what the subresource may change taken from obj, the request's
	// object; it must not keep either.
	Update func(obj, old runtime.Object)
	// Validate checks the object Update made against the stored one.
	Validate func(obj, old runtime.Object) field.ErrorList
}

// Conversion converts a resource's objects to and from the version they
// are stored at. The machinery converts every object it reads from the
// store with FromStorage and every object it writes with ToStorage, so
// that the rules, admission and clients see only the resource's own
// version. The stored version is served by a Resource of its own, whose
// objects share the resource's store keys (same group and plural). An
// EncodingJSON resource may name its own version as StorageVersion, with
// functions that convert the objects stored at other versions (a
// CustomResourceDefinition's earlier storage versions); FromStorage sees
// an unstructured object at the version it was stored at.
type Conversion struct {
	// StorageVersion is the version objects are stored at.
	StorageVersion string
	// NewStorage returns an empty object of the stored version's Go type,
	// registered with the server's scheme by some resource's AddToScheme;
	// nil for EncodingJSON, whose objects are unstructured.
	NewStorage func() runtime.Object
	// ToStorage converts an object of the resource's version to one of
	// StorageVersion, and FromStorage back; they must not keep or change
	// their argument. Nil for an EncodingJSON resource converts
	// apiVersion alone, as upstream's conversion strategy None.
	ToStorage, FromStorage func(obj runtime.Object) (runtime.Object, error)
}

// Rules is what every resource with rules contributes to the generic
// machinery: its validation. What else a resource contributes it says by
// implementing the optional interfaces below (Defaulter, CreatePreparer,
// UpdatePreparer, CreateOnUpdater, FieldSelector, Printer,
// StatusPreparer, StatusValidator, GracefulDeleter, DeleteFinalizer,
// Finalizable, Allocator); the machinery
// does nothing of its own at a step whose interface the rules lack,
// except printing (see Printer).
//
// The machinery calls them in this order on a create: Default, generic
// metadata (name from generateName, uid, creationTimestamp),
// PrepareForCreate, Validate. On an update of the main resource: Default,
// PrepareForUpdate, ValidateUpdate (the object then carries the stored
// uid, creationTimestamp and, for an unconditional update,
// resourceVersion). On a status update: PrepareForStatusUpdate, then
// ValidateStatusUpdate.
// Config.Admission, when set, is asked after these and before the write.
// Objects are the resource's own Go types (e.g. *corev1.Pod); methods may
// mutate the object they are given and must not keep it.
type Rules interface {
	// Validate checks a new object, metadata included (with
	// ValidateObjectMeta and the resource's name rule), returning errors
	// with field paths such as spec.containers[0].image.
	Validate(obj runtime.Object) field.ErrorList
	// ValidateUpdate checks an update completely: Validate's checks plus
	// immutable fields (the machinery does not also call Validate).
	ValidateUpdate(obj, old runtime.Object) field.ErrorList
}

// Defaulter is implemented by rules of resources with defaults: Default
// applies those upstream Kubernetes applies when it decodes an object
// (SetObjectDefaults_* in k8s.io/kubernetes), e.g. restartPolicy Always,
// dnsPolicy ClusterFirst, port protocol TCP.
type Defaulter interface {
	Default(obj runtime.Object)
}

// UnknownFieldsReporter is implemented by rules of resources whose
// schema, not their Go type, says which fields exist (custom resources):
// UnknownFields returns the paths of the fields of obj, as decoded from a
// request, that the schema does not know and Default would prune.
// fieldValidation=Strict refuses them and Warn warns of them, as a typed
// resource's strict decoder reports its unknown fields.
type UnknownFieldsReporter interface {
	UnknownFields(obj runtime.Object) []string
}

// CreatePreparer is implemented by rules that clear, on create, what a
// client may not set, typically Status.
type CreatePreparer interface {
	PrepareForCreate(obj runtime.Object)
}

// UpdatePreparer is implemented by rules that restore, on an update of
// the main resource, what such an update must not change beyond Status
// (which the machinery keeps when Resource.Status is set). It is given
// the new object and the stored one.
type UpdatePreparer interface {
	PrepareForUpdate(obj, old runtime.Object)
}

// CreateOnUpdater is implemented by rules of resources for which a PUT
// of a missing object creates it, as upstream allows for a few;
// AllowCreateOnUpdate reports whether it does.
type CreateOnUpdater interface {
	AllowCreateOnUpdate() bool
}

// FieldSelector is implemented by rules of resources with field-selector
// values beyond metadata.name and metadata.namespace, which the machinery
// adds (spec.nodeName and status.phase for pods, type for secrets, ...).
// Fields returns them for obj; the machinery may add to the set.
type FieldSelector interface {
	Fields(obj runtime.Object) fields.Set
}

// Printer is implemented by rules of resources with Table columns of
// their own, as upstream's printers define them. Columns returns their
// definitions, a copy the caller owns; Priority 1 columns are shown only
// with -o wide. Row returns the cells of obj for Columns, in order; Age is
// computed by the rules from creationTimestamp like the rest. A resource
// without a Printer is shown as upstream shows one without printers: its
// name and creation time (defaultColumns).
type Printer interface {
	Columns() []metav1.TableColumnDefinition
	Row(obj runtime.Object) []interface{}
}

// StatusPreparer is implemented by rules that restore, on a status
// update, what it may not change within the status (a certificate
// signing request's Approved condition), once the machinery has taken
// the new status onto the stored object. It is given that object and the
// stored one.
type StatusPreparer interface {
	PrepareForStatusUpdate(obj, old runtime.Object)
}

// StatusValidator is implemented by rules that check status updates; the
// machinery otherwise accepts any Status.
type StatusValidator interface {
	ValidateStatusUpdate(obj, old runtime.Object) field.ErrorList
}

// GracefulDeleter is implemented by rules of resources whose deletion may
// be graceful (pods bound to a node). GracePeriod returns the grace period
// to apply for a delete with the requested one (nil when the client gave
// none); 0 deletes at once, more marks the object with deletionTimestamp and
// deletionGracePeriodSeconds and leaves it for its node to confirm.
type GracefulDeleter interface {
	GracePeriod(obj runtime.Object, requested *int64) int64
}

// DeleteFinalizer is implemented by rules of resources whose deletion
// waits for work of their own, as a CustomResourceDefinition's waits for
// its objects to be deleted: FinalizersOnDelete returns the finalizers the
// first delete of obj adds, which marks obj deleted instead of removing it
// (upstream's CRD storage adds customresourcecleanup.apiextensions.k8s.io
// so). Their owner removes them when its work is done.
type DeleteFinalizer interface {
	FinalizersOnDelete(obj runtime.Object) []string
}

// ScaleRules reads and writes the replica counts the scale subresource
// exposes.
type ScaleRules struct {
	// Get returns spec.replicas, status.replicas and the label selector in
	// its string form (status.selector of the Scale).
	Get func(obj runtime.Object) (specReplicas, statusReplicas int32, selector string)
	// Set sets spec.replicas.
	Set func(obj runtime.Object, replicas int32)
}

// Allocator is implemented by rules of resources whose objects hold values
// that must be unique across the resource, such as a service's cluster IP.
// On create, after validation, the machinery calls Assign, which fills in
// the values obj lacks and reserves every value obj holds through reserve;
// reserve reports false when another object holds the value. The machinery
// records reservations in the store and releases them when the object is
// deleted or its create fails.
type Allocator interface {
	// Assign fills in and reserves obj's unique values.
	Assign(obj runtime.Object, reserve func(value string) (bool, error)) error
	// Held returns the unique values obj holds.
	Held(obj runtime.Object) []string
}
