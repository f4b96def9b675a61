package volumes

import (
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// file is one file of a volume's content: what the atomic writer puts at
// a path relative to the volume.
type file struct {
	data []byte
	mode uint32 // permission bits, as the spec's modes give them
	// uid, when set, owns the file (a projected token read by a pod
	// whose containers all run as one user, as kubelet's FsUser).
	uid *int64
}

// payload maps paths relative to a volume to their files.
type payload map[string]file

// Modes of the API's defaulting for the four kinds of volume that project
// objects into files (ConfigMapVolumeSourceDefaultMode and the like).
const (
	defaultMode = 0o644
	// tokenModeOwned is a projected token's mode when the pod sets
	// fsGroup or all its containers run as one user, as kubelet narrows
	// it (fsGroup then widens it to 0640).
	tokenModeOwned = 0o600
)

// Limits of a path in a volume, as kubelet's atomic writer's.
const (
	maxFileNameLength = 255
	maxPathLength     = 4096
)

// validatePath reports whether p may name a file in a volume: relative,
// not empty, no ".." element, no first element beginning with ".."
// (the writer's own names), within the length limits.
func validatePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("invalid path %q: must not be empty", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("invalid path %q: must be relative", p)
	case len(p) > maxPathLength:
		return fmt.Errorf("invalid path: must be at most %d characters", maxPathLength)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("invalid path %q: must not contain NUL", p)
	}
	items := strings.Split(p, "/")
	for _, item := range items {
		if item == ".." {
			return fmt.Errorf("invalid path %q: must not contain '..'", p)
		}
		if len(item) > maxFileNameLength {
			return fmt.Errorf("invalid path: file names must be at most %d characters", maxFileNameLength)
		}
	}
	if strings.HasPrefix(items[0], "..") {
		return fmt.Errorf("invalid path %q: must not start with '..'", p)
	}
	if path.Clean(p) == "." {
		return fmt.Errorf("invalid path %q: names the volume itself", p)
	}
	return nil
}

// modeOf returns the mode a file gets: its own if set, else the volume's
// default if set, else the API's default. Only permission bits count.
func modeOf(item, def *int32) uint32 {
	switch {
	case item != nil:
		return uint32(*item) & 0o777
	case def != nil:
		return uint32(*def) & 0o777
	}
	return defaultMode
}

func isTrue(b *bool) bool { return b != nil && *b }

// keysPayload projects data (a configMap's or secret's, kind naming it
// for errors) as kubelet's configMap and secret plugins do: every key
// under its own name, or, with items, only the items' keys under their
// paths, a missing one an error wrapping ErrMissingSource unless
// optional.
func keysPayload(out payload, kind, namespace, name string, data map[string][]byte, items []corev1.KeyToPath, def *int32, optional bool) error {
	if len(items) == 0 {
		for k, v := range data {
			out[k] = file{data: v, mode: modeOf(nil, def)}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return &MissingError{Kind: kind, Namespace: namespace, Name: name, Key: it.Key}
		}
		out[it.Path] = file{data: v, mode: modeOf(it.Mode, def)}
	}
	return nil
}

// configMapData returns a configMap's data and binaryData as bytes, as
// kubelet projects them.
func configMapData(cm *corev1.ConfigMap) map[string][]byte {
	out := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		out[k] = []byte(v)
	}
	maps.Copy(out, cm.BinaryData)
	return out
}

// podInfo is what a volume's content is made of beyond the pod: the
// node's allocatable resources (a container's limit where it sets none),
// the pod's fsGroup-derived ownership, and the clock for tokens.
type podInfo struct {
	pod             *corev1.Pod
	nodeAllocatable corev1.ResourceList
	fsGroup         *int64
	fsUser          *int64
	now             time.Time
}

// downwardPayload projects items as kubelet's downwardAPI plugin does:
// fieldRef values and resourceFieldRef values, each file's lines sorted.
func downwardPayload(out payload, items []corev1.DownwardAPIVolumeFile, in *podInfo, def *int32) error {
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = fieldValue(in.pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			v, err = resourceValue(in.pod, it.ResourceFieldRef, in.nodeAllocatable)
		default:
			err = fmt.Errorf("downward API file %q has neither fieldRef nor resourceFieldRef", it.Path)
		}
		if err != nil {
			return fmt.Errorf("downward API file %q: %w", it.Path, err)
		}
		out[path.Clean(it.Path)] = file{data: []byte(sortLines(v)), mode: modeOf(it.Mode, def)}
	}
	return nil
}

// sortLines sorts the lines of v, as kubelet does with every downward API
// file (it matters for labels and annotations).
func sortLines(v string) string {
	lines := strings.Split(v, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// fieldValue returns the value of a downward API volume's fieldRef, as
// kubelet's fieldpath package: name, namespace, uid, labels, annotations,
// or one label or annotation by key (metadata.labels['key']).
func fieldValue(pod *corev1.Pod, fieldPath string) (string, error) {
	if p, key, ok := splitSubscript(fieldPath); ok {
		switch p {
		case "metadata.annotations":
			return pod.Annotations[key], nil
		case "metadata.labels":
			return pod.Labels[key], nil
		}
		return "", fmt.Errorf("unsupported fieldPath %q", fieldPath)
	}
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q", fieldPath)
}

// splitSubscript splits "metadata.labels['key']" into its path and key.
func splitSubscript(fieldPath string) (string, string, bool) {
	i := strings.Index(fieldPath, "['")
	if i < 0 || !strings.HasSuffix(fieldPath, "']") || len(fieldPath) < i+4 {
		return "", "", false
	}
	return fieldPath[:i], fieldPath[i+2 : len(fieldPath)-2], true
}

// formatMap formats m as kubelet's fieldpath.FormatMap: key="value" lines
// sorted by key, values quoted as Go quotes strings, no final newline.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%v=%q", k, m[k])
	}
	return b.String()
}

// resourceValue returns the value of a resourceFieldRef as kubelet's
// resource helpers compute it: the named container's (or, with no name,
// the only container's) limit or request, a limit it does not set being
// the node's allocatable, divided by the divisor (1 when unset) and
// rounded up.
func resourceValue(pod *corev1.Pod, ref *corev1.ResourceFieldSelector, nodeAllocatable corev1.ResourceList) (string, error) {
	c, err := findContainer(pod, ref.ContainerName)
	if err != nil {
		return "", err
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported container resource %q", ref.Resource)
	}
	rn := corev1.ResourceName(name)
	switch {
	case rn == corev1.ResourceCPU, rn == corev1.ResourceMemory, rn == corev1.ResourceEphemeralStorage:
	case strings.HasPrefix(name, corev1.ResourceHugePagesPrefix):
	default:
		return "", fmt.Errorf("unsupported container resource %q", ref.Resource)
	}
	var q resource.Quantity
	if kind == "requests" {
		q = c.Resources.Requests[rn]
	} else {
		var set bool
		q, set = c.Resources.Limits[rn]
		// kubelet's MergeContainerResourceLimits: cpu, memory and
		// ephemeral-storage limits default to the node's allocatable.
		if !set && !strings.HasPrefix(name, corev1.ResourceHugePagesPrefix) {
			q = nodeAllocatable[rn]
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if divisor.Sign() < 0 {
		return "", fmt.Errorf("divisor %s of %q is negative", divisor.String(), ref.Resource)
	}
	if rn == corev1.ResourceCPU {
		return ceilDiv(float64(q.MilliValue()), float64(divisor.MilliValue())), nil
	}
	return ceilDiv(float64(q.Value()), float64(divisor.Value())), nil
}

// ceilDiv returns the ceiling of a/b in decimal, as kubelet's helpers
// (which divide as floats).
func ceilDiv(a, b float64) string {
	if b == 0 {
		b = 1
	}
	v := math.Ceil(a / b)
	if math.IsNaN(v) || math.IsInf(v, 0) || v > math.MaxInt64 || v < math.MinInt64 {
		v = 0
	}
	return strconv.FormatInt(int64(v), 10)
}

// findContainer returns pod's container (or init container) of that name;
// with no name, the pod's only container.
func findContainer(pod *corev1.Pod, name string) (*corev1.Container, error) {
	if name == "" {
		if len(pod.Spec.Containers) == 1 {
			return &pod.Spec.Containers[0], nil
		}
		return nil, fmt.Errorf("resourceFieldRef needs a containerName in a pod of %d containers", len(pod.Spec.Containers))
	}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("container %q not found", name)
}
