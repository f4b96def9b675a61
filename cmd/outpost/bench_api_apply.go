package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/bench/report"
)

// newBenchAPIApplyCmd returns `outpost bench api apply`, which measures
// server-side apply of a many-field object against a plain update and a
// merge patch of the same object, on hubs it runs as children.
func newBenchAPIApplyCmd() *cobra.Command {
	var (
		cfg   = defaultApplyConfig()
		out   string
		quick bool
	)
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Measure server-side apply of a 100-field object against update (PUT) and merge patch",
		Long: `Start a hub (this binary, ` + "`outpost hub`" + `, with its controllers, which accept a
CustomResourceDefinition's names) on a fresh data dir under --dir and a free
loopback port, then, for --duration each, let --clients concurrent writers,
sharing one client, rewrite an object of --fields fields each, changing
--changed of its values per write, in three ways:

  update  PUT of the whole object, with the resourceVersion last returned
  merge   PATCH application/merge-patch+json of the changed fields only
  apply   PATCH application/apply-patch+yaml of the whole object (server-side
          apply, fieldManager outpost-bench, force=true), as kubectl apply
          --server-side and client-go's Apply do

The object is a ConfigMap with --fields data keys and, unless
--custom-resource=false, also a custom resource with --fields string fields
in its spec (a structural schema). Each way runs against a hub of its own,
and --rounds rounds alternate their order, so that a slow spell of a shared
machine does not fall on one way only; the median round by writes/s is
reported. Every request is JSON, as the dynamic client and kubectl send it.
The results, writes/s, latency and the hub's CPU time per write, with apply
as a ratio of update and of merge, are printed as tables and written as
JSON to --out.`,
		Example: `  outpost bench api apply --quick
  outpost bench api apply --clients 8 --duration 10s --rounds 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if quick {
				unlessSet(cmd.Flags(), "duration", &cfg.Duration, 2*time.Second)
				unlessSet(cmd.Flags(), "rounds", &cfg.Rounds, 1)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary to run the hub: %w", err)
			}
			cfg.Binary = exe
			if err := cfg.validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			rep, err := runApplyBench(cmd.Context(), cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "parent directory of the hubs' temporary data dirs (default the system temp dir)")
	f.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "namespace the objects are written in")
	f.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent writers, sharing one client, each rewriting an object of its own")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each way of writing each kind of object runs")
	f.IntVar(&cfg.Fields, "fields", cfg.Fields, "fields of each object: ConfigMap data keys, custom resource spec fields")
	f.IntVar(&cfg.Changed, "changed", cfg.Changed, "fields given a new value by each write")
	f.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds of the three ways, in alternating order, each against fresh hubs; the median round by writes/s is reported")
	f.BoolVar(&cfg.CustomResource, "custom-resource", cfg.CustomResource, "also write a custom resource, not only a ConfigMap")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "longest wait for a hub to be ready and to serve the custom resource")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "how long a hub gets to exit after SIGTERM before it is killed")
	f.StringVar(&out, "out", "bench-results/api-apply.json", "file to write the results to as JSON")
	f.BoolVar(&quick, "quick", false, "2s per way and kind, one round, for a smoke run (flags given explicitly still apply)")
	return cmd
}

// applyConfig sets what `outpost bench api apply` measures. Durations
// encode in JSON as nanoseconds.
type applyConfig struct {
	// Binary is the outpost binary the hubs run from.
	Binary    string `json:"-"`
	Dir       string `json:"dir,omitempty"`
	Namespace string `json:"namespace"`
	// Clients writers share one client, each rewriting its own object,
	// so that writes never conflict: 4.
	Clients  int           `json:"clients"`
	Duration time.Duration `json:"duration_ns"`
	// Fields is the object's field count, Changed how many of them a
	// write changes: 100 and 10.
	Fields  int `json:"fields"`
	Changed int `json:"changed"`
	Rounds  int `json:"rounds"`
	// CustomResource adds a custom resource to the ConfigMap.
	CustomResource bool          `json:"custom_resource"`
	ReadyTimeout   time.Duration `json:"ready_timeout_ns"`
	StopTimeout    time.Duration `json:"stop_timeout_ns"`
}

// defaultApplyConfig returns the defaults: a few seconds a way, so that a
// run of one round takes about half a minute.
func defaultApplyConfig() applyConfig {
	return applyConfig{
		Namespace:      "bench",
		Clients:        4,
		Duration:       5 * time.Second,
		Fields:         100,
		Changed:        10,
		Rounds:         1,
		CustomResource: true,
		ReadyTimeout:   60 * time.Second,
		StopTimeout:    30 * time.Second,
	}
}

// maxApplyFields bounds Fields so that field names keep three digits.
const maxApplyFields = 1000

// validate reports the first invalid field.
func (c applyConfig) validate() error {
	switch {
	case c.Binary == "":
		return errors.New("no outpost binary to run the hub with")
	case c.Namespace == "":
		return errors.New("namespace is empty")
	case c.Clients < 1:
		return fmt.Errorf("client count %d is under 1", c.Clients)
	case c.Duration < 100*time.Millisecond:
		return fmt.Errorf("duration %v is under 100ms", c.Duration)
	case c.Fields < 1 || c.Fields > maxApplyFields:
		return fmt.Errorf("field count %d is not between 1 and %d", c.Fields, maxApplyFields)
	case c.Changed < 1 || c.Changed > c.Fields:
		return fmt.Errorf("changed field count %d is not between 1 and the field count %d", c.Changed, c.Fields)
	case c.Rounds < 1:
		return fmt.Errorf("round count %d is under 1", c.Rounds)
	case c.ReadyTimeout <= 0:
		return fmt.Errorf("ready timeout %v is not positive", c.ReadyTimeout)
	case c.StopTimeout <= 0:
		return fmt.Errorf("stop timeout %v is not positive", c.StopTimeout)
	}
	return nil
}

// The ways of writing an object, in their first round's order.
const (
	writeUpdate = "update"
	writeMerge  = "merge"
	writeApply  = "apply"
)

var writeWays = []string{writeUpdate, writeMerge, writeApply}

// roundOrder returns the ways in round r's order: rotated by r, so that
// each way runs first, in the middle and last in turn.
func roundOrder(r int) []string {
	n := len(writeWays)
	out := make([]string, n)
	for i := range n {
		out[i] = writeWays[(i+r)%n]
	}
	return out
}

// The kinds of object written.
const (
	kindConfigMap = "ConfigMap"
	kindCustom    = "custom resource"
)

// applyFieldManager is the field manager of every write.
const applyFieldManager = "outpost-bench"

// The custom resource of the apply benchmark.
const (
	applyGroup  = "applybench.outpost.dev"
	applyKind   = "Record"
	applyPlural = "records"
)

// writeResult is one way of writing one kind of object in one round.
type writeResult struct {
	Kind  string `json:"kind"`
	Way   string `json:"way"`
	Round int    `json:"round"`
	// Writes counts successful writes, Failed the others; Errors holds
	// their distinct messages.
	Writes int      `json:"writes"`
	Failed int      `json:"failed"`
	Errors []string `json:"errors,omitempty"`
	// Seconds is the measured span; PerSec is Writes/Seconds.
	Seconds float64        `json:"seconds"`
	PerSec  float64        `json:"writes_per_sec"`
	Latency report.Latency `json:"latency"`
	// HubCPUPerWrite is the hub's CPU time over the span, per successful
	// write; 0 when /proc could not be read.
	HubCPUPerWrite time.Duration `json:"hub_cpu_per_write_ns"`
	// BodyBytes is the size of one write's request body.
	BodyBytes int `json:"body_bytes"`
	// Median marks the round reported for its kind and way.
	Median bool `json:"median,omitempty"`
}

// applyReport is what `outpost bench api apply` measured.
type applyReport struct {
	Machine report.Machine `json:"machine"`
	Config  applyConfig    `json:"config"`
	// Results holds every round's results; Median marks those reported.
	Results []writeResult    `json:"results"`
	Load    []report.LoadAvg `json:"load"`
}

// runApplyBench runs cfg.Rounds rounds of the three ways, each way
// against a fresh hub, and reports them.
func runApplyBench(ctx context.Context, cfg applyConfig, progress io.Writer) (*applyReport, error) {
	rep := &applyReport{Config: cfg, Load: []report.LoadAvg{report.ReadLoadAvg("start")}}
	kinds := []string{kindConfigMap}
	if cfg.CustomResource {
		kinds = append(kinds, kindCustom)
	}
	for r := range cfg.Rounds {
		for _, way := range roundOrder(r) {
			fmt.Fprintf(progress, "round %d of %d: %s\n", r+1, cfg.Rounds, way)
			res, err := runWriteWay(ctx, cfg, way, kinds, progress)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r+1, way, err)
			}
			for i := range res {
				res[i].Round = r + 1
			}
			rep.Results = append(rep.Results, res...)
		}
	}
	markMedians(rep.Results)
	rep.Load = append(rep.Load, report.ReadLoadAvg("end"))
	rep.Machine = report.DescribeMachine()
	return rep, nil
}

// markMedians marks, for each kind and way, the median result by
// writes/s (the lower median for an even count).
func markMedians(rs []writeResult) {
	groups := map[[2]string][]int{}
	for i, r := range rs {
		k := [2]string{r.Kind, r.Way}
		groups[k] = append(groups[k], i)
	}
	for _, idx := range groups {
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case rs[a].PerSec < rs[b].PerSec:
				return -1
			case rs[a].PerSec > rs[b].PerSec:
				return 1
			}
			return 0
		})
		rs[idx[(len(idx)-1)/2]].Median = true
	}
}

// runWriteWay starts a hub, writes each kind of object one way against
// it for cfg.Duration, and stops the hub.
func runWriteWay(ctx context.Context, cfg applyConfig, way string, kinds []string, progress io.Writer) (res []writeResult, err error) {
	fmt.Fprint(progress, "  starting hub ... ")
	hub, err := startBenchHub(ctx, cfg.Binary, cfg.Dir, cfg.CustomResource, cfg.ReadyTimeout)
	if err != nil {
		fmt.Fprintln(progress, "failed")
		return nil, err
	}
	fmt.Fprintln(progress, "ready")
	defer func() {
		if exit := hub.stop(cfg.StopTimeout); exit != "exit status 0" && err == nil {
			fmt.Fprintf(progress, "  hub stopped: %s\n", exit)
		}
	}()
	restCfg, err := benchRESTConfig(hub.kubeconfig)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	if err := createNamespace(ctx, restCfg, cfg.Namespace); err != nil {
		return nil, err
	}
	for _, kind := range kinds {
		target := writeTarget{kind: kind, fields: cfg.Fields, namespace: cfg.Namespace}
		if kind == kindCustom {
			if err := createApplyCRD(ctx, restCfg, dc, cfg); err != nil {
				return nil, err
			}
		}
		target.res = dc.Resource(target.gvr()).Namespace(cfg.Namespace)
		fmt.Fprintf(progress, "  %s of a %s, %d clients, %v ... ", way, kind, cfg.Clients, cfg.Duration)
		r, err := writeFor(ctx, cfg, target, way, hub.pid())
		if err != nil {
			fmt.Fprintln(progress, "failed")
			return nil, err
		}
		fmt.Fprintf(progress, "%s, p99 %s\n", report.Rate(r.PerSec), report.Duration(r.Latency.P99))
		res = append(res, r)
	}
	return res, nil
}

// createNamespace creates namespace on the hub of restCfg.
func createNamespace(ctx context.Context, restCfg *rest.Config, namespace string) error {
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("clientset: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	return nil
}

// createApplyCRD defines the Record custom resource, cfg.Fields string
// fields in its spec, and waits until its objects can be listed.
func createApplyCRD(ctx context.Context, restCfg *rest.Config, dc dynamic.Interface, cfg applyConfig) error {
	props := map[string]apiextensionsv1.JSONSchemaProps{}
	for i := range cfg.Fields {
		props[fieldName(i)] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: applyPlural + "." + applyGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: applyGroup,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: applyPlural, Kind: applyKind},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: props},
					},
				}},
			}},
		},
	}
	if err := createCRD(ctx, restCfg, crd); err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: applyGroup, Version: "v1", Resource: applyPlural}
	return pollUntil(ctx, cfg.ReadyTimeout, 20*time.Millisecond, "the custom resource to be served", func() error {
		_, err := dc.Resource(gvr).Namespace(cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
}

// createCRD creates crd on the hub of restCfg.
func createCRD(ctx context.Context, restCfg *rest.Config, crd *apiextensionsv1.CustomResourceDefinition) error {
	ec, err := apiextensionsclient.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	if _, err := ec.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create CRD %s: %w", crd.Name, err)
	}
	return nil
}

// fieldName returns the name of an object's i-th field.
func fieldName(i int) string { return fmt.Sprintf("f%03d", i) }

// writeTarget is the kind of object written and where.
type writeTarget struct {
	kind      string
	fields    int
	namespace string
	res       dynamic.ResourceInterface
}

// gvr returns the resource of t's kind.
func (t writeTarget) gvr() schema.GroupVersionResource {
	if t.kind == kindCustom {
		return schema.GroupVersionResource{Group: applyGroup, Version: "v1", Resource: applyPlural}
	}
	return schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
}

// object returns the whole object named name with values: the ConfigMap's
// data or the custom resource's spec.
func (t writeTarget) object(name string, values []string) *unstructured.Unstructured {
	m := make(map[string]any, len(values))
	for i, v := range values {
		m[fieldName(i)] = v
	}
	o := map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": name, "namespace": t.namespace},
	}
	if t.kind == kindCustom {
		o["apiVersion"], o["kind"], o["spec"] = applyGroup+"/v1", applyKind, m
	} else {
		o["data"] = m
	}
	return &unstructured.Unstructured{Object: o}
}

// patch returns a merge patch setting the fields of changed to values.
func (t writeTarget) patch(values []string, changed []int) map[string]any {
	m := make(map[string]any, len(changed))
	for _, i := range changed {
		m[fieldName(i)] = values[i]
	}
	if t.kind == kindCustom {
		return map[string]any{"spec": m}
	}
	return map[string]any{"data": m}
}

// writer is one client's object and what it last wrote.
type writer struct {
	t      writeTarget
	way    string
	name   string
	values []string
	rv     string // of the last write, for update
	n      int    // writes so far, which picks the fields to change
}

// create writes the writer's object the first time, untimed: by apply
// for the apply way, so that its fields are the apply manager's, and by
// create for the others.
func (w *writer) create(ctx context.Context) error {
	w.values = make([]string, w.t.fields)
	for i := range w.values {
		w.values[i] = "value-" + strconv.Itoa(i) + "-0"
	}
	obj := w.t.object(w.name, w.values)
	var (
		got *unstructured.Unstructured
		err error
	)
	if w.way == writeApply {
		body, _ := json.Marshal(obj.Object)
		got, err = w.t.res.Patch(ctx, w.name, types.ApplyPatchType, body, applyOptions())
	} else {
		got, err = w.t.res.Create(ctx, obj, metav1.CreateOptions{FieldManager: applyFieldManager})
	}
	if err != nil {
		return fmt.Errorf("create %s %s: %w", w.t.kind, w.name, err)
	}
	w.rv = got.GetResourceVersion()
	return nil
}

// applyOptions are the options of every apply.
func applyOptions() metav1.PatchOptions {
	force := true
	return metav1.PatchOptions{FieldManager: applyFieldManager, Force: &force}
}

// next changes the values of the next cfg.Changed fields, round the
// object, and returns which.
func (w *writer) next(changed int) []int {
	idx := make([]int, changed)
	w.n++
	for k := range idx {
		i := ((w.n-1)*changed + k) % len(w.values)
		idx[k] = i
		w.values[i] = "value-" + strconv.Itoa(i) + "-" + strconv.Itoa(w.n)
	}
	return idx
}

// write makes one write of the writer's way and returns its body's size.
func (w *writer) write(ctx context.Context, changed int) (int, error) {
	idx := w.next(changed)
	var (
		got  *unstructured.Unstructured
		body []byte
		err  error
	)
	switch w.way {
	case writeApply:
		body, _ = json.Marshal(w.t.object(w.name, w.values).Object)
		got, err = w.t.res.Patch(ctx, w.name, types.ApplyPatchType, body, applyOptions())
	case writeMerge:
		body, _ = json.Marshal(w.t.patch(w.values, idx))
		got, err = w.t.res.Patch(ctx, w.name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: applyFieldManager})
	default:
		obj := w.t.object(w.name, w.values)
		obj.SetResourceVersion(w.rv)
		body, _ = json.Marshal(obj.Object)
		got, err = w.t.res.Update(ctx, obj, metav1.UpdateOptions{FieldManager: applyFieldManager})
	}
	if err != nil {
		return len(body), err
	}
	w.rv = got.GetResourceVersion()
	return len(body), nil
}

// writeFor creates cfg.Clients objects of t's kind, then rewrites them
// way, one writer each, for cfg.Duration, and measures it.
func writeFor(ctx context.Context, cfg applyConfig, t writeTarget, way string, hubPID int) (writeResult, error) {
	r := writeResult{Kind: t.kind, Way: way}
	ws := make([]*writer, cfg.Clients)
	for i := range ws {
		ws[i] = &writer{t: t, way: way, name: fmt.Sprintf("%s-%d", way, i)}
		if err := ws[i].create(ctx); err != nil {
			return r, err
		}
	}
	var (
		mu     sync.Mutex
		lat    []time.Duration
		errs   report.ErrorSet
		wg     sync.WaitGroup
		failed int
	)
	cpuBefore, cpuErr := procCPUSeconds(hubPID)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	for _, w := range ws {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				n, err := w.write(ctx, cfg.Changed)
				d := time.Since(t0)
				mu.Lock()
				r.BodyBytes = n
				if err != nil {
					failed++
					errs.Add(err.Error())
				}
				mu.Unlock()
				if err == nil {
					mine = append(mine, d)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpuAfter, cpuErr2 := procCPUSeconds(hubPID)
	if err := ctx.Err(); err != nil {
		return r, err
	}
	r.Writes, r.Failed, r.Errors = len(lat), failed, errs.List()
	r.Seconds = elapsed.Seconds()
	r.PerSec = float64(r.Writes) / r.Seconds
	r.Latency = report.Summarize(lat)
	if cpuErr == nil && cpuErr2 == nil && r.Writes > 0 {
		r.HubCPUPerWrite = time.Duration((cpuAfter - cpuBefore) / float64(r.Writes) * 1e9)
	}
	if r.Writes == 0 {
		return r, fmt.Errorf("no %s of a %s succeeded: %v", way, t.kind, r.Errors)
	}
	return r, nil
}

// medians returns the reported result of each kind and way, by kind then
// way in writeWays' order.
func (r *applyReport) medians() map[string]map[string]writeResult {
	m := map[string]map[string]writeResult{}
	for _, res := range r.Results {
		if !res.Median {
			continue
		}
		if m[res.Kind] == nil {
			m[res.Kind] = map[string]writeResult{}
		}
		m[res.Kind][res.Way] = res
	}
	return m
}

// Render writes a table per kind of object, the ratios of apply to the
// other ways, every round when there were several, and the machine.
func (r *applyReport) Render(w io.Writer) error {
	var b strings.Builder
	c := r.Config
	b.WriteString("API benchmark: server-side apply against update and merge patch, against hubs in child processes\n\n")
	med := r.medians()
	kinds := []string{kindConfigMap, kindCustom}
	ratios := report.NewTable("apply as a ratio of the others (medians)", "object", "writes/s vs update", "p99 vs update", "hub CPU vs update", "writes/s vs merge", "p99 vs merge", "hub CPU vs merge")
	for _, kind := range kinds {
		ways, ok := med[kind]
		if !ok {
			continue
		}
		tb := report.NewTable(fmt.Sprintf("%s of %d fields, %d changed per write", kind, c.Fields, c.Changed),
			"way", "writes/s", "p50", "p99", "max", "hub CPU/write", "body", "failed")
		for _, way := range writeWays {
			x := ways[way]
			tb.AddRow(way, report.Rate(x.PerSec), report.Duration(x.Latency.P50), report.Duration(x.Latency.P99),
				report.Duration(x.Latency.Max), cpuPerWriteCell(x.HubCPUPerWrite), report.Bytes(uint64(x.BodyBytes)), strconv.Itoa(x.Failed))
		}
		b.WriteString(tb.String())
		b.WriteByte('\n')
		a, u, m := ways[writeApply], ways[writeUpdate], ways[writeMerge]
		ratios.AddRow(kind,
			report.Ratio(a.PerSec, u.PerSec), report.Ratio(float64(a.Latency.P99), float64(u.Latency.P99)), report.Ratio(float64(a.HubCPUPerWrite), float64(u.HubCPUPerWrite)),
			report.Ratio(a.PerSec, m.PerSec), report.Ratio(float64(a.Latency.P99), float64(m.Latency.P99)), report.Ratio(float64(a.HubCPUPerWrite), float64(m.HubCPUPerWrite)))
	}
	b.WriteString(ratios.String())
	fmt.Fprintf(&b, "\n%d writers sharing one client, each rewriting an object of its own for %v per way and kind; JSON on the wire.\n", c.Clients, c.Duration)
	b.WriteString("update: PUT of the whole object; merge: merge patch of the changed fields; apply: server-side apply of the whole object, force=true.\n")
	b.WriteString("Latency is of each call, which returns once the write is durable. Hub CPU is the hub process's, from /proc, over the span, per write.\n")
	b.WriteString("Each way ran against a hub of its own (controllers on, idle); client and hub share this machine's CPUs.\n")
	if c.Rounds > 1 {
		fmt.Fprintf(&b, "\nThe tables are the median of %d rounds by writes/s, the ways' order rotating each round:\n", c.Rounds)
		rt := report.NewTable("", "round", "object", "way", "writes/s", "p99", "hub CPU/write", "")
		for _, x := range r.Results {
			mark := ""
			if x.Median {
				mark = "median"
			}
			rt.AddRow(strconv.Itoa(x.Round), x.Kind, x.Way, report.Rate(x.PerSec), report.Duration(x.Latency.P99), cpuPerWriteCell(x.HubCPUPerWrite), mark)
		}
		b.WriteString(rt.String())
	}
	for _, x := range r.Results {
		for _, e := range x.Errors {
			fmt.Fprintf(&b, "round %d, %s of a %s: error: %s\n", x.Round, x.Way, x.Kind, e)
		}
	}
	report.WriteLoad(&b, r.Load)
	b.WriteString("\nmachine\n")
	b.WriteString(r.Machine.String())
	_, err := io.WriteString(w, b.String())
	return err
}

// cpuPerWriteCell formats a CPU time per write, or "-" if unmeasured.
func cpuPerWriteCell(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return report.Duration(d)
}

// benchHub is a hub run as a child process by `outpost bench api apply`
// and `outpost bench api crd`: this binary's `outpost hub` on a fresh
// data dir, serving the API on a free loopback port, without a sync
// endpoint. The hub's log goes to hub.log in its data dir's parent.
type benchHub struct {
	dir        string // the temporary directory, removed by stop
	cmd        *exec.Cmd
	kubeconfig string
	exited     chan struct{} // closed once the process has been waited for
	waitErr    error         // set before exited is closed
}

// startBenchHub starts a hub from binary in a new temporary directory
// under parent, with or without its controllers, and waits, at most
// timeout, for it to print its kubeconfig.
func startBenchHub(ctx context.Context, binary, parent string, controllers bool, timeout time.Duration) (*benchHub, error) {
	dir, err := os.MkdirTemp(parent, "outpost-bench-")
	if err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	logFile, err := os.Create(filepath.Join(dir, "hub.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("create hub log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	h := &benchHub{dir: dir, exited: make(chan struct{})}
	h.cmd = exec.Command(binary, "hub", "--data-dir", filepath.Join(dir, "hub"), "--api-addr", "127.0.0.1:0",
		"--sync-addr", "", "--controllers="+strconv.FormatBool(controllers))
	h.cmd.Stderr = logFile
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("hub stdout: %w", err)
	}
	if err := h.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start hub: %w", err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if path, ok := strings.CutPrefix(sc.Text(), "export KUBECONFIG="); ok {
				select {
				case found <- path:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout) // a line too long for the scanner
		h.waitErr = h.cmd.Wait()
		close(h.exited)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case h.kubeconfig = <-found:
		return h, nil
	case <-h.exited:
		err = fmt.Errorf("hub exited before it was ready: %v%s", h.waitErr, h.logTail())
	case <-t.C:
		err = fmt.Errorf("hub not ready within %v%s", timeout, h.logTail())
	case <-ctx.Done():
		err = ctx.Err()
	}
	h.stop(time.Second)
	return nil, err
}

// pid returns the hub's process id.
func (h *benchHub) pid() int { return h.cmd.Process.Pid }

// logTail returns the last lines of the hub's log, indented on lines of
// their own, or "".
func (h *benchHub) logTail() string {
	b, err := os.ReadFile(filepath.Join(h.dir, "hub.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(len(lines)-10, 0):]
	return "\n    " + strings.Join(lines, "\n    ")
}

// stop sends SIGTERM, kills the hub if it has not exited within timeout,
// removes its directory, and returns how it ended.
func (h *benchHub) stop(timeout time.Duration) string {
	defer os.RemoveAll(h.dir)
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		h.cmd.Process.Kill()
		<-h.exited
		return fmt.Sprintf("killed: SIGTERM failed: %v", err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-h.exited:
	case <-t.C:
		h.cmd.Process.Kill()
		<-h.exited
		return fmt.Sprintf("killed after not exiting within %v of SIGTERM", timeout)
	}
	if h.waitErr != nil {
		return h.waitErr.Error()
	}
	return h.cmd.ProcessState.String()
}

// benchRESTConfig returns the client config of the kubeconfig at path,
// without client-side rate limiting.
func benchRESTConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS = -1
	cfg.Burst = 1 << 20
	cfg.UserAgent = "outpost-bench-api"
	return cfg, nil
}

// pollUntil calls try every interval until it returns nil, and fails
// with try's last error once timeout has passed or ctx ends.
func pollUntil(ctx context.Context, timeout, interval time.Duration, what string, try func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := try()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting %v for %s: %w", timeout, what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat:
// 100 on every Linux architecture, fixed by the kernel's ABI.
const clockTicks = 100

// procCPUSeconds returns the user and system CPU time process pid has
// used, from /proc (Linux only).
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatCPUSeconds(b)
}

// parseStatCPUSeconds returns utime+stime, in seconds, from the contents
// of /proc/PID/stat.
func parseStatCPUSeconds(b []byte) (float64, error) {
	// The command name, field 2, is in parentheses and may hold spaces
	// and parentheses: the other fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("parse /proc stat: no command name")
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3, the state; utime and stime are fields 14, 15.
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("parse /proc stat: %d fields after the command name", len(fields))
	}
	var ticks uint64
	for _, f := range []string{fields[utime], fields[stime]} {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc stat cpu time: %w", err)
		}
		ticks += n
	}
	return float64(ticks) / clockTicks, nil
}
