package apibench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/outpost-mesh/outpost/bench/report"
)

// TestRunMemoryQuick runs the quick memory workload end to end against a
// real hub and checks the report's shape: every phase, list and watch
// there and adding up. Memory figures are only checked to be there.
func TestRunMemoryQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the outpost binary")
	}
	cfg := QuickMemoryConfig()
	cfg.Binary = buildOutpost(t)
	cfg.Dir = t.TempDir()
	cfg.ProfileDir = t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var progress bytes.Buffer
	rep, err := RunMemory(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("RunMemory = %v\nprogress:\n%s", err, progress.String())
	}
	t.Logf("progress:\n%s", progress.String())
	if left, _ := os.ReadDir(cfg.Dir); len(left) != 0 {
		t.Errorf("RunMemory left %d entries in %s, want the hub's data dir removed", len(left), cfg.Dir)
	}

	r := rep.Result
	payload := uint64(cfg.Objects * cfg.ObjectSize)
	if r.Created != cfg.Objects || r.Failed != 0 || len(r.CreateErrors) != 0 {
		t.Errorf("created %d, failed %d (%q); want %d created", r.Created, r.Failed, r.CreateErrors, cfg.Objects)
	}
	if r.StoredBytes < payload || r.StoredBytes > 2*payload {
		t.Errorf("stored %d bytes, want about the %d of object data", r.StoredBytes, payload)
	}
	if r.DataDirBytes == 0 || r.DataDirApparentBytes == 0 {
		t.Errorf("data dir %d bytes on disk, %d in files; want both measured", r.DataDirBytes, r.DataDirApparentBytes)
	}

	var names []string
	for _, p := range r.Phases {
		names = append(names, p.Name)
	}
	wantNames := []string{PhaseReady, PhaseCreate}
	for _, l := range listSpecs(cfg) {
		wantNames = append(wantNames, l.name)
	}
	wantNames = append(wantNames, PhaseSettle, PhaseRestart)
	if strings.Join(names, "|") != strings.Join(wantNames, "|") {
		t.Fatalf("phases %q, want %q", names, wantNames)
	}
	for i, p := range r.Phases {
		if runtime.GOOS == "linux" && (p.RSSBytes == 0 || p.PeakBytes == 0 || p.RSSAnonBytes == 0) {
			t.Errorf("phase %s = %+v, want RSS and peak read from /proc", p.Name, p)
		}
		if p.Duration <= 0 {
			t.Errorf("phase %s took %v", p.Name, p.Duration)
		}
		specs := listSpecs(cfg)
		if i < 2 || i >= 2+len(specs) {
			if p.List != nil {
				t.Errorf("phase %s has a list: %+v", p.Name, p.List)
			}
			continue
		}
		spec, l := specs[i-2], p.List
		if l == nil {
			t.Errorf("list phase %s has no list", p.Name)
			continue
		}
		pages := 1
		if spec.limit > 0 {
			pages = (cfg.Objects + spec.limit - 1) / spec.limit
		}
		if l.Error != "" || l.Items != cfg.Objects || l.Requests < pages || l.Requests > pages+1 || l.FirstByte <= 0 || l.Accept != spec.accept || l.Limit != spec.limit {
			t.Errorf("%s = %+v, want %d items in %d..%d pages", p.Name, l, cfg.Objects, pages, pages+1)
		}
		if table := spec.accept == acceptTable; table && l.BodyBytes >= payload || !table && l.BodyBytes < payload {
			t.Errorf("%s read %d bytes: want more than the %d of object data, or less for a Table", p.Name, l.BodyBytes, payload)
		}
	}
	if runtime.GOOS == "linux" && r.PeakFrom == "" {
		t.Errorf("PeakFrom is empty")
	}

	if len(r.Watches) != cfg.JSONWatches+cfg.ProtobufWatches {
		t.Fatalf("%d watches, want %d", len(r.Watches), cfg.JSONWatches+cfg.ProtobufWatches)
	}
	for i, w := range r.Watches {
		enc := "json"
		if i >= cfg.JSONWatches {
			enc = "protobuf"
		}
		if w.Encoding != enc || w.Added != cfg.Objects || w.Other != 0 || w.Error != "" || w.Bytes < payload {
			t.Errorf("watch %d = %+v, want %s with %d ADDED events of at least %d bytes", i, w, enc, cfg.Objects, payload)
		}
	}
	if r.ReadySeconds <= 0 || r.RestartReadySeconds <= 0 || r.Exit != "exit status 0" || r.RestartExit != "exit status 0" {
		t.Errorf("ready after %.2fs and %.2fs, exits %q and %q; want positive times and exit status 0",
			r.ReadySeconds, r.RestartReadySeconds, r.Exit, r.RestartExit)
	}
	if r.ProcError != "" || len(r.ProfileErrors) != 0 {
		t.Errorf("proc error %q, profile errors %q", r.ProcError, r.ProfileErrors)
	}
	for _, name := range wantNames {
		if fi, err := os.Stat(filepath.Join(cfg.ProfileDir, "hub.heap."+slug(name)+".pprof")); err != nil || fi.Size() == 0 {
			t.Errorf("heap profile of %s: %v, want a non-empty file", name, err)
		}
	}

	// Quick runs are not held to the targets, only to correctness.
	s := rep.Summary
	if s.StoredBytes != r.StoredBytes || (runtime.GOOS == "linux" && (s.PeakBytes == 0 || s.SettledBytes == 0 || s.RestartBytes == 0 || s.PeakRatio <= 0)) {
		t.Errorf("summary = %+v", s)
	}
	for _, tg := range rep.Targets {
		want := TargetNA
		if tg.Row == completeRow {
			want = TargetMet
		}
		if tg.Status != want {
			t.Errorf("target %q = %s (%s), want %s", tg.Goal, tg.Status, tg.Detail, want)
		}
	}

	var out strings.Builder
	if err := rep.Render(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"peak/stored", "list protobuf, limit 8", "list Table, limit 8", "settled RSS", "bytes stored", "RSS when ready after restart", "machine"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Render() has no %q:\n%s", want, out.String())
		}
	}
	path := filepath.Join(t.TempDir(), "api-memory.json")
	if err := report.WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back MemoryReport
	if err := json.Unmarshal(b, &back); err != nil || back.Result == nil || len(back.Result.Phases) != len(r.Phases) || back.Summary != rep.Summary {
		t.Errorf("JSON round trip = %+v, %v", back.Result, err)
	}
	svg := rep.Chart().SVG()
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil || strings.Count(svg, `class="bar"`) != 2*len(r.Phases) {
		t.Errorf("Chart().SVG(): %v, %d bars, want %d:\n%s", err, strings.Count(svg, `class="bar"`), 2*len(r.Phases), svg)
	}
}

func TestRunMemoryHubFails(t *testing.T) {
	cfg := QuickMemoryConfig()
	cfg.Binary = "/bin/false"
	cfg.Dir = t.TempDir()
	if _, err := RunMemory(t.Context(), cfg, nil); err == nil || !strings.Contains(err.Error(), "hub exited before it was ready") {
		t.Errorf("RunMemory with a hub that exits = %v, want it reported", err)
	}
	if left, _ := os.ReadDir(cfg.Dir); len(left) != 0 {
		t.Errorf("RunMemory left %d entries in %s", len(left), cfg.Dir)
	}
}

func TestMemoryValidate(t *testing.T) {
	ok := QuickMemoryConfig()
	ok.Binary = "outpost"
	ok.HubArgs = []string{"--memory-limit=600MB"}
	for _, c := range []MemoryConfig{ok, func() MemoryConfig { d := DefaultMemoryConfig(); d.Binary = "outpost"; return d }()} {
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate(%+v) = %v", c, err)
		}
	}
	for name, mod := range map[string]func(*MemoryConfig){
		"no binary":       func(c *MemoryConfig) { c.Binary = "" },
		"no namespace":    func(c *MemoryConfig) { c.Namespace = "" },
		"no objects":      func(c *MemoryConfig) { c.Objects = 0 },
		"empty objects":   func(c *MemoryConfig) { c.ObjectSize = 0 },
		"too large":       func(c *MemoryConfig) { c.ObjectSize = MaxObjectSize + 1 },
		"no writers":      func(c *MemoryConfig) { c.Writers = 0 },
		"neg watches":     func(c *MemoryConfig) { c.ProtobufWatches = -1 },
		"no page size":    func(c *MemoryConfig) { c.PageSize = 0 },
		"neg small page":  func(c *MemoryConfig) { c.SmallPageSize = -1 },
		"no settle limit": func(c *MemoryConfig) { c.SettleLimit = 0 },
		"no sampling":     func(c *MemoryConfig) { c.SampleInterval = 0 },
		"hub arg":         func(c *MemoryConfig) { c.HubArgs = []string{"memory-limit"} },
	} {
		c := ok
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%s) = nil, want an error", name)
		}
	}
}

func TestEvaluateMemory(t *testing.T) {
	const stored = 200_000_000
	result := func(peak, settled uint64) *MemoryResult {
		return &MemoryResult{
			Created:     400,
			StoredBytes: stored,
			Phases: []MemoryPhase{
				{Name: PhaseReady, RSSBytes: 100e6, PeakBytes: 100e6},
				{Name: PhaseCreate, RSSBytes: 300e6, PeakBytes: peak},
				{Name: "list JSON", RSSBytes: 300e6, PeakBytes: 310e6, List: &StreamList{Items: 400}},
				{Name: PhaseSettle, RSSBytes: settled, PeakBytes: settled},
				{Name: PhaseRestart, RSSBytes: 150e6, PeakBytes: 160e6},
			},
			Watches: []StreamWatch{{Encoding: "json", Added: 400}, {Encoding: "protobuf", Added: 400}},
		}
	}
	statuses := func(ts []Target) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.Status)
		}
		return strings.Join(s, ",")
	}
	incomplete := result(500e6, 300e6)
	incomplete.Watches[1].Added = 399
	noProc := result(0, 0)
	noProc.ProcError = "no /proc"
	for _, tc := range []struct {
		name string
		cfg  MemoryConfig
		res  *MemoryResult
		want string
	}{
		{"met", DefaultMemoryConfig(), result(500e6, 300e6), "met,met,met"},
		// Limits for 200 MB: peak 550 MB, settled 400 MB.
		{"missed", DefaultMemoryConfig(), result(1.7e9, 743e6), "MISSED,MISSED,met"},
		{"at the limit", DefaultMemoryConfig(), result(550e6, 400e6), "MISSED,MISSED,met"},
		{"incomplete", DefaultMemoryConfig(), incomplete, "met,met,MISSED"},
		{"quick", QuickMemoryConfig(), result(1.7e9, 743e6), "n/a,n/a,met"},
		{"no proc", DefaultMemoryConfig(), noProc, "n/a,n/a,met"},
	} {
		s := summarizeMemory(tc.res)
		if got := statuses(evaluateMemory(tc.cfg, tc.res, s)); got != tc.want {
			t.Errorf("evaluateMemory(%s) = %s, want %s (summary %+v)", tc.name, got, tc.want, s)
		}
	}
	s := summarizeMemory(result(1.7e9, 743e6))
	want := MemorySummary{
		StoredBytes: stored, PeakBytes: 1.7e9, PeakPhase: PhaseCreate, SettledBytes: 743e6, RestartBytes: 150e6,
		PeakRatio: 8.5, SettledRatio: 3.715, RestartRatio: 0.75, PeakLimitBytes: 550e6, SettledLimitBytes: 400e6,
	}
	if s != want {
		t.Errorf("summarizeMemory = %+v, want %+v", s, want)
	}
}

// serializerFor returns client-go's serializer for a media type.
func serializerFor(t *testing.T, mediaType string) k8sruntime.SerializerInfo {
	t.Helper()
	for _, info := range scheme.Codecs.SupportedMediaTypes() {
		if info.MediaType == mediaType {
			return info
		}
	}
	t.Fatalf("no serializer for %s", mediaType)
	return k8sruntime.SerializerInfo{}
}

func testList(n int) *corev1.ConfigMapList {
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next-page"}}
	for i := range n {
		l.Items = append(l.Items, *newConfigMap(MemoryConfig{Namespace: "ns", ObjectSize: 1000}, i))
	}
	return l
}

func encode(t *testing.T, mediaType string, obj k8sruntime.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := scheme.Codecs.EncoderForVersion(serializerFor(t, mediaType).Serializer, corev1.SchemeGroupVersion)
	if err := enc.Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestReadLists(t *testing.T) {
	table := &metav1.Table{
		ListMeta:          metav1.ListMeta{Continue: "t"},
		ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "Name", Type: "string"}},
		Rows:              []metav1.TableRow{{Cells: []any{"a"}}, {Cells: []any{"b"}}},
	}
	tableJSON, err := json.Marshal(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		body  []byte
		read  func(io.Reader) (int, string, error)
		items int
		cont  string
	}{
		{"json", encode(t, acceptJSON, testList(5)), readJSONList, 5, "next-page"},
		{"json empty", []byte(`{"kind":"ConfigMapList","metadata":{"resourceVersion":"1"},"items":null}`), readJSONList, 0, ""},
		{"json table", tableJSON, readJSONList, 2, "t"},
		{"protobuf", encode(t, acceptProtobuf, testList(5)), readProtoList, 5, "next-page"},
		{"protobuf empty", encode(t, acceptProtobuf, &corev1.ConfigMapList{}), readProtoList, 0, ""},
	} {
		items, cont, err := tc.read(bytes.NewReader(tc.body))
		if err != nil || items != tc.items || cont != tc.cont {
			t.Errorf("%s: read = %d, %q, %v; want %d, %q", tc.name, items, cont, err, tc.items, tc.cont)
		}
		// Cut short anywhere, the body is an error, never a shorter list.
		body := bytes.TrimSpace(tc.body) // JSON ends with a newline
		for _, cut := range []int{0, 3, 10, len(body) / 2, len(body) - 1} {
			if _, _, err := tc.read(bytes.NewReader(body[:cut])); err == nil {
				t.Errorf("%s cut at %d of %d bytes: nil error", tc.name, cut, len(body))
			}
		}
	}
	if _, _, err := readProtoList(strings.NewReader("not protobuf")); err == nil {
		t.Error("readProtoList of text: nil error")
	}
}

// watchStream returns the bytes of a watch stream of n ADDED events and
// an ERROR, framed as the hub frames them.
func watchStream(t *testing.T, mediaType string, n int) []byte {
	t.Helper()
	info := serializerFor(t, mediaType)
	var out bytes.Buffer
	send := func(typ string, obj k8sruntime.Object) {
		raw := encode(t, mediaType, obj)
		ev := &metav1.WatchEvent{Type: typ, Object: k8sruntime.RawExtension{Raw: bytes.TrimSpace(raw)}}
		if mediaType == acceptJSON {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			out.Write(append(b, '\n'))
			return
		}
		var b bytes.Buffer
		if err := info.StreamSerializer.Serializer.Encode(ev, &b); err != nil {
			t.Fatal(err)
		}
		if _, err := info.StreamSerializer.Framer.NewFrameWriter(&out).Write(b.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	for _, cm := range testList(n).Items {
		send("ADDED", &cm)
	}
	send("ERROR", &metav1.Status{Status: metav1.StatusFailure, Message: "too old", Code: 410})
	return out.Bytes()
}

func TestReadWatch(t *testing.T) {
	for _, protobuf := range []bool{false, true} {
		mt := acceptJSON
		if protobuf {
			mt = acceptProtobuf
		}
		w := &streamWatch{protobuf: protobuf}
		br := bufio.NewReaderSize(bytes.NewReader(watchStream(t, mt, 7)), 64) // events longer than the buffer
		var err error
		if protobuf {
			err = w.readProtobuf(br)
		} else {
			err = w.readJSON(br)
		}
		if err != io.EOF || w.added.Load() != 7 || w.res.Other != 1 || !strings.HasPrefix(w.res.Error, "error event") {
			t.Errorf("%s: read = %v, %d added, %d other, error %q; want EOF after 7 ADDED and an ERROR",
				mt, err, w.added.Load(), w.res.Other, w.res.Error)
		}
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"ready":                "ready",
		"list JSON, limit 500": "list-json-limit-500",
		"list Table, limit 8":  "list-table-limit-8",
		"  odd -- name ":       "odd-name",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
