package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The schema of record, testdata/sync.proto, is parsed here at test time
// (protocompile is pure Go: nothing to install, nothing generated to keep
// fresh), and only here: no file of the build imports it, so it is never
// linked into a binary.

// schema is sync.proto compiled: its messages by name, and the frame
// messages by the type byte their "// type N" comment gives.
type schema struct {
	byName map[string]protoreflect.MessageDescriptor
	byType map[Type]protoreflect.MessageDescriptor
}

var typeComment = regexp.MustCompile(`^\s*type (\d+)\s*$`)

func compileSchema(t *testing.T, src string) *schema {
	t.Helper()
	c := protocompile.Compiler{
		Resolver:       &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(map[string]string{"sync.proto": src})},
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := c.Compile(context.Background(), "sync.proto")
	if err != nil {
		t.Fatalf("compile sync.proto: %v", err)
	}
	fd := files[0]
	s := &schema{byName: map[string]protoreflect.MessageDescriptor{}, byType: map[Type]protoreflect.MessageDescriptor{}}
	msgs := fd.Messages()
	for i := range msgs.Len() {
		md := msgs.Get(i)
		s.byName[string(md.Name())] = md
		m := typeComment.FindStringSubmatch(fd.SourceLocations().ByDescriptor(md).LeadingComments)
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil || n < 1 || n > 255 {
			t.Fatalf("sync.proto: message %s has type %q", md.Name(), m[1])
		}
		if prev, dup := s.byType[Type(n)]; dup {
			t.Fatalf("sync.proto: type %d names both %s and %s", n, prev.Name(), md.Name())
		}
		s.byType[Type(n)] = md
	}
	return s
}

func readSchema(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "sync.proto"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSchemaNamesEveryType: every frame type this build knows has its
// message in sync.proto, of the same name, and the schema names no type
// this build does not know.
func TestSchemaNamesEveryType(t *testing.T) {
	s := compileSchema(t, readSchema(t))
	for n := 1; n <= 255; n++ {
		typ := Type(n)
		known := !strings.HasPrefix(typ.String(), "Type(")
		md, inSchema := s.byType[typ]
		switch {
		case known && !inSchema:
			t.Errorf("type %d (%v) has no message in sync.proto: add one with the comment \"// type %d\"", n, typ, n)
		case !known && inSchema:
			t.Errorf("sync.proto gives type %d to %s, a type this build does not know", n, md.Name())
		case known && string(md.Name()) != typ.String():
			t.Errorf("sync.proto names type %d %s, the code %v", n, md.Name(), typ)
		}
	}
}

// TestSchemaDecodesGolden: the body of every golden frame, decoded with
// the schema's message for its type byte, holds field by field what the
// hand-written decoder reads from it, and no field the schema does not
// name. So the schema and the code agree on every field number of every
// capability version.
func TestSchemaDecodesGolden(t *testing.T) {
	s := compileSchema(t, readSchema(t))
	for _, d := range goldenDiffs(t, s) {
		t.Error(d)
	}
}

// TestSchemaRenumbered: the check above fails on a schema whose field
// numbers were swapped, or whose type comment moved.
func TestSchemaRenumbered(t *testing.T) {
	src := readSchema(t)
	for _, tc := range []struct {
		name string
		edit []string // pairs: old, new
	}{
		{"swapped fields of one type", []string{
			"  string token = 2;\n  string node_name = 3;", "  string token = 3;\n  string node_name = 2;",
		}},
		{"swapped fields of two types", []string{
			"  string node_name = 2;\n  int64 last_revision = 3;", "  string node_name = 3;\n  int64 last_revision = 2;",
		}},
		{"renumbered field", []string{
			"  string message = 2;\n  uint64 retry_after_ms = 3;", "  string message = 4;\n  uint64 retry_after_ms = 3;",
		}},
		{"swapped types", []string{
			"// type 11\nmessage RenewRequest", "// type 12\nmessage RenewRequest",
			"// type 12\nmessage RenewResponse", "// type 11\nmessage RenewResponse",
		}},
	} {
		bad := src
		for i := 0; i < len(tc.edit); i += 2 {
			if !strings.Contains(bad, tc.edit[i]) {
				t.Fatalf("%s: sync.proto has no %q", tc.name, tc.edit[i])
			}
			bad = strings.Replace(bad, tc.edit[i], tc.edit[i+1], 1)
		}
		if d := goldenDiffs(t, compileSchema(t, bad)); len(d) == 0 {
			t.Errorf("%s: the golden frames still agree with the schema", tc.name)
		} else {
			t.Logf("%s: %s", tc.name, d[0])
		}
	}
}

// goldenObjects holds the golden entries that are objects, not frames,
// each with a value of its type: the schema's message of the same name
// decodes it.
var goldenObjects = map[string]any{
	"podtokens-object": (*PodTokens)(nil),
	"meshkeys-object":  (*MeshKeys)(nil),
}

// goldenDiffs decodes the golden frames of every version with s and
// returns where they differ from the hand-written decoder.
func goldenDiffs(t *testing.T, s *schema) []string {
	t.Helper()
	var diffs []string
	for v := range CapabilityVersion + 1 {
		path := filepath.Join("testdata", "golden", fmt.Sprintf("v%d.txt", v))
		if _, err := os.Stat(path); v == 0 || os.IsNotExist(err) {
			continue
		}
		frames := readGolden(t, path)
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range frames {
				if !yield(n) {
					return
				}
			}
		})
		for _, name := range names {
			at := fmt.Sprintf("v%d %s", v, name)
			b := frames[name]
			if like, ok := goldenObjects[name]; ok { // an object, not a frame
				want, err := decodeObject(like, b)
				if err != nil {
					diffs = append(diffs, fmt.Sprintf("%s: %v", at, err))
					continue
				}
				v := reflect.ValueOf(want).Elem()
				diffs = append(diffs, schemaDiff(at, s.byName[v.Type().Name()], b, v)...)
				continue
			}
			want, err := NewReader(bytes.NewReader(b), 0).Read()
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("%s: %v", at, err))
				continue
			}
			size, n := binary.Uvarint(b)
			if n <= 0 || n+2+int(size) != len(b) || b[n+1] != 0 {
				diffs = append(diffs, fmt.Sprintf("%s: not one uncompressed frame", at))
				continue
			}
			md := s.byType[Type(b[n])]
			if md == nil {
				diffs = append(diffs, fmt.Sprintf("%s: no message in the schema for type %d", at, b[n]))
				continue
			}
			diffs = append(diffs, schemaDiff(at, md, b[n+2:], reflect.ValueOf(want).Elem())...)
		}
	}
	return diffs
}

// schemaDiff decodes body as md and compares it with want, the
// hand-decoded struct.
func schemaDiff(at string, md protoreflect.MessageDescriptor, body []byte, want reflect.Value) []string {
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(body, m); err != nil {
		return []string{fmt.Sprintf("%s: the schema's %s does not decode it: %v", at, md.Name(), err)}
	}
	return compareMessage(at+": "+string(md.Name()), m, want)
}

// compareMessage compares the fields of m with those of the struct gv,
// matched by name: the proto's snake_case is the Go name in lower case
// without the underscores (retry_after_ms is a time.Duration RetryAfter).
// Every exported Go field must have its proto field, and m no field the
// schema does not name.
func compareMessage(path string, m protoreflect.Message, gv reflect.Value) []string {
	var diffs []string
	if u := m.GetUnknown(); len(u) > 0 {
		diffs = append(diffs, fmt.Sprintf("%s: fields the schema does not name: %v", path, unknownNumbers(u)))
	}
	gt := gv.Type()
	covered := map[string]bool{}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		sf, ok := goField(gt, string(fd.Name()))
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s.%s: %v has no such field", path, fd.Name(), gt))
			continue
		}
		covered[sf.Name] = true
		gf := gv.FieldByIndex(sf.Index)
		p := path + "." + string(fd.Name())
		if !fd.IsList() {
			diffs = append(diffs, compareValue(p, fd, m.Get(fd), gf)...)
			continue
		}
		list := m.Get(fd).List()
		if list.Len() != gf.Len() {
			diffs = append(diffs, fmt.Sprintf("%s: %d elements, the code read %d", p, list.Len(), gf.Len()))
			continue
		}
		for j := range list.Len() {
			diffs = append(diffs, compareValue(fmt.Sprintf("%s[%d]", p, j), fd, list.Get(j), gf.Index(j))...)
		}
	}
	for _, sf := range reflect.VisibleFields(gt) {
		if sf.IsExported() && !sf.Anonymous && !covered[sf.Name] {
			diffs = append(diffs, fmt.Sprintf("%s: the schema has no field for %v.%s", path, gt, sf.Name))
		}
	}
	return diffs
}

// goField finds the Go field of a proto field, among the struct's own
// and those an embedded struct promotes. A time.Duration or a time.Time
// may have "_ms" after its name: it is sent in milliseconds.
func goField(gt reflect.Type, protoName string) (reflect.StructField, bool) {
	name := strings.ReplaceAll(protoName, "_", "")
	for _, sf := range reflect.VisibleFields(gt) {
		if !sf.IsExported() || sf.Anonymous {
			continue
		}
		n := strings.ToLower(sf.Name)
		timed := sf.Type == reflect.TypeFor[time.Duration]() || sf.Type == reflect.TypeFor[time.Time]()
		if n == name || (timed && n+"ms" == name) {
			return sf, true
		}
	}
	return reflect.StructField{}, false
}

// compareValue compares one value of field fd.
func compareValue(path string, fd protoreflect.FieldDescriptor, pv protoreflect.Value, gv reflect.Value) []string {
	if fd.Message() != nil {
		return compareMessage(path, pv.Message(), gv)
	}
	var got any // what the schema decoded
	switch fd.Kind() {
	case protoreflect.BoolKind:
		got = pv.Bool()
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind, protoreflect.EnumKind:
		got = pv.Int()
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		got = pv.Uint()
	case protoreflect.StringKind:
		got = pv.String()
	case protoreflect.BytesKind:
		got = fmt.Sprintf("%x", pv.Bytes())
	default:
		return []string{fmt.Sprintf("%s: kind %v is not used by the protocol", path, fd.Kind())}
	}
	var want any // what the code decoded, as it is on the wire
	switch v := gv.Interface().(type) {
	case time.Duration: // whole milliseconds, rounded up
		want = uint64((v + time.Millisecond - 1) / time.Millisecond)
	case time.Time: // Unix seconds, or milliseconds for a *_ms field; 0 for none
		want = uint64(0)
		switch {
		case v.IsZero():
		case strings.HasSuffix(string(fd.Name()), "_ms"):
			want = uint64(v.UnixMilli())
		default:
			want = uint64(v.Unix())
		}
	case []byte:
		want = fmt.Sprintf("%x", v)
	case netip.Addr: // 4 or 16 bytes
		want = fmt.Sprintf("%x", v.AsSlice())
	default:
		switch gv.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			want = gv.Int()
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			want = gv.Uint()
		case reflect.Bool:
			want = gv.Bool()
		case reflect.String:
			want = gv.String()
		default:
			return []string{fmt.Sprintf("%s: the code's %v has no wire form here", path, gv.Type())}
		}
	}
	if got != want {
		return []string{fmt.Sprintf("%s = %v (%T) by the schema, %v (%T) by the code", path, got, got, want, want)}
	}
	return nil
}

// unknownNumbers lists the field numbers in raw, encoded fields.
func unknownNumbers(raw []byte) []int {
	var nums []int
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return append(nums, -1)
		}
		nums = append(nums, int(num))
		raw = raw[n:]
		m := protowire.ConsumeFieldValue(num, typ, raw)
		if m < 0 {
			return append(nums, -1)
		}
		raw = raw[m:]
	}
	return nums
}
