package apiserver

import (
	"math/bits"
	"strconv"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// A patch is a small program run against the stored object, and what it
// costs to run is not bounded by its size: a JSON patch inserting into a
// long array copies the array once per operation, and a strategic merge
// patch merges lists by key with a linear search per element and sorts
// them with one per comparison. The functions here estimate, before the
// patch is applied and in time linear in the patch and the document, how
// many elementary steps applying it will take, so that a patch over
// maxPatchWork is refused at once rather than run for minutes. The
// estimates follow what the libraries do (gopkg.in/evanphx/json-patch.v4
// and k8s.io/apimachinery's strategicpatch) and err on the high side.

// jsonPatchWork estimates the steps of applying p to doc: every operation
// that inserts into or removes from an array (its path, or a move's from,
// ends in an index) allocates and copies the array, which is at most every
// array element of the document and of the patch's values. An element
// copied costs about four of the steps smpWork counts.
func jsonPatchWork(doc, patch []byte, p jsonpatch.Patch) int64 {
	elems := 4 * (arrayElemBound(doc) + arrayElemBound(patch))
	var work int64
	for _, op := range p {
		work++
		var shifts bool
		switch op.Kind() {
		case "add", "copy":
			shifts = endsInIndex(op, "path")
		case "remove":
			shifts = endsInIndex(op, "path")
		case "move":
			shifts = endsInIndex(op, "from") || endsInIndex(op, "path")
		}
		if shifts {
			work += elems
		}
	}
	return work
}

// endsInIndex reports whether the JSON pointer under key of op ends in an
// array index ("-", appending, costs nothing).
func endsInIndex(op jsonpatch.Operation, key string) bool {
	raw := op[key]
	if raw == nil {
		return false
	}
	s := string(*raw)
	if len(s) < 2 || s[0] != '"' {
		return false
	}
	ptr, err := strconv.Unquote(s)
	if err != nil {
		return false
	}
	last := ptr[strings.LastIndexByte(ptr, '/')+1:]
	_, err = strconv.Atoi(last)
	return err == nil
}

// arrayElemBound returns an upper bound of the number of array elements in
// the JSON text b: every element is preceded by a '[' or a ',' outside a
// string. It does not check that b is JSON.
func arrayElemBound(b []byte) int64 {
	var n int64
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == ',':
			n++
		}
	}
	return n
}

// Directive keys of strategic merge patches.
const (
	smpSetElementOrder = "$setElementOrder/"
	smpDeleteFromList  = "$deleteFromPrimitiveList/"
	smpDirective       = "$patch"
)

// smpCost estimates the steps of strategicpatch merging patch into
// original under schema. It walks the patch, and the part of original it
// touches, once; it stops counting once the estimate passes limit.
type smpCost struct {
	work, limit int64
}

// smpWork estimates the steps of the strategic merge patch of patch into
// original for objects like dataStruct, stopping once past limit.
func smpWork(original, patch map[string]any, dataStruct any, limit int64) int64 {
	schema, err := strategicpatch.NewPatchMetaFromStruct(dataStruct)
	if err != nil {
		return 0 // the patch fails at once on the same error
	}
	c := &smpCost{limit: limit}
	c.mapWork(original, patch, schema)
	return c.work
}

// mapWork adds the cost of merging the patch map into original, as
// strategicpatch's mergeMap does.
func (c *smpCost) mapWork(original, patch map[string]any, schema strategicpatch.LookupPatchMeta) {
	c.work += int64(len(patch))
	if _, ok := patch[smpDirective]; ok {
		return // replace or delete the whole map: linear
	}
	for k, pv := range patch {
		if c.work > c.limit {
			return
		}
		switch {
		case strings.HasPrefix(k, smpSetElementOrder):
			// Counted with the list it orders, below, if that list is in
			// the patch; otherwise it orders the original list alone.
			field := k[len(smpSetElementOrder):]
			if _, inPatch := patch[field]; !inPatch {
				c.listWork(original, field, nil, pv, schema)
			}
			continue
		case strings.HasPrefix(k, smpDeleteFromList):
			// A set difference through a map: linear.
			if l, ok := pv.([]any); ok {
				c.work += int64(len(l) + len(asList(original[k[len(smpDeleteFromList):]])))
			}
			continue
		case strings.HasPrefix(k, "$"):
			c.work += int64(len(asList(pv)))
			continue
		}
		ov, inOriginal := original[k]
		switch pv := pv.(type) {
		case map[string]any:
			om, ok := ov.(map[string]any)
			if !ok {
				continue // taken as it is, directives removed: linear
			}
			sub, _, err := schema.LookupPatchMetadataForStruct(k)
			if err != nil {
				continue // the merge fails here too
			}
			c.mapWork(om, pv, sub)
		case []any:
			if _, ordered := patch[smpSetElementOrder+k]; !inOriginal && !ordered {
				c.work += int64(len(pv)) // taken as it is: linear
				continue
			}
			c.listWork(original, k, pv, patch[smpSetElementOrder+k], schema)
		}
	}
}

// listWork adds the cost of merging the patch list under key into
// original's, ordered by order (the $setElementOrder list, or nil).
func (c *smpCost) listWork(original map[string]any, key string, patch []any, order any, schema strategicpatch.LookupPatchMeta) {
	sub, meta, err := schema.LookupPatchMetadataForSlice(key)
	if err != nil {
		return // the merge fails here too
	}
	merge := false
	for _, s := range meta.GetPatchStrategies() {
		if s == "merge" {
			merge = true
		}
	}
	orig := asList(original[key])
	ord := asList(order)
	if !merge && len(ord) == 0 {
		c.work += int64(len(patch)) // replaced whole
		return
	}
	// Merging compares every patch element with the list merged so far;
	// ordering sorts the patch elements, and the original's, with a
	// comparison that searches the order list, and merges the two sorted
	// lists with a search of the original per step; scalars are
	// deduplicated pairwise. All of that is within s*s*log(s).
	s := int64(len(orig) + len(patch) + len(ord))
	c.work += s * s * int64(bits.Len64(uint64(s))+1)
	if c.work > c.limit {
		return
	}
	// Elements merged into an original element of the same merge key
	// merge their own fields in turn.
	mergeKey := meta.GetPatchMergeKey()
	if mergeKey == "" || len(orig) == 0 {
		return
	}
	byKey := make(map[any]map[string]any, len(orig))
	for _, o := range orig {
		if om, ok := o.(map[string]any); ok {
			if v, ok := om[mergeKey]; ok && scalar(v) {
				byKey[v] = om
			}
		}
	}
	for _, p := range patch {
		pm, ok := p.(map[string]any)
		if !ok {
			continue
		}
		v, ok := pm[mergeKey]
		if !ok || !scalar(v) {
			continue
		}
		if om, ok := byKey[v]; ok {
			c.mapWork(om, pm, sub)
		}
		if c.work > c.limit {
			return
		}
	}
}

// scalar reports whether a decoded JSON value can be a map key: a
// scalar, as merge keys are.
func scalar(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return false
	}
	return true
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
