package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/outpost-mesh/outpost/bench/report"
)

// newBenchAPICRDCmd returns `outpost bench api crd`, which measures what
// creating and deleting a CustomResourceDefinition costs until clients
// see it, on a hub it runs as a child.
func newBenchAPICRDCmd() *cobra.Command {
	var (
		cfg   = defaultCRDConfig()
		out   string
		quick bool
	)
	cmd := &cobra.Command{
		Use:   "crd",
		Short: "Measure a CRD create until discovery, OpenAPI and kubectl get see it, and a CRD delete until its objects are gone",
		Long: `Start a hub (this binary, ` + "`outpost hub`" + `, with its controllers, which accept a
CustomResourceDefinition's names and delete its objects when it goes) on a
fresh data dir under --dir and a free loopback port, then create --crds
CRDs one after the other, each a group and kind of its own with a small
structural schema, and time, from each create:

  established  its Established condition is True
  discovery    the aggregated discovery document (/apis, apidiscovery.k8s.io/v2)
               lists its resource
  openapi      /openapi/v3 lists its group version (at most --openapi-timeout)
  kubectl get  ` + "`kubectl get KIND`" + ` succeeds, kubectl (--kubectl) run again and
               again, each time with an empty HOME and --cache-dir, so that
               its discovery is cold, as a user's first command is

Then each CRD gets --objects objects and is deleted, and the delete is
timed until the objects are gone, the CRD is gone, and discovery no longer
lists it. The aggregated discovery document's size is read before, after
the creates and after the deletes. A cold ` + "`kubectl get configmaps`" + ` is timed
first, the floor of the kubectl stage. Stages not reached within their
timeout are reported as not reached. The results, min, median and max per
stage, are printed as tables and written as JSON to --out.`,
		Example: `  outpost bench api crd --quick
  outpost bench api crd --crds 20 --kubectl kubectl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if quick {
				unlessSet(cmd.Flags(), "crds", &cfg.CRDs, 3)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary to run the hub: %w", err)
			}
			cfg.Binary = exe
			if err := cfg.validate(); err != nil {
				return fmt.Errorf("invalid flags: %w", err)
			}
			rep, err := runCRDBench(cmd.Context(), cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return writeReport(cmd, rep, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "parent directory of the hub's temporary data dir and kubectl's homes (default the system temp dir)")
	f.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "namespace the custom objects are created in")
	f.IntVar(&cfg.CRDs, "crds", cfg.CRDs, "CRDs to create and delete, one after the other")
	f.IntVar(&cfg.Objects, "objects", cfg.Objects, "objects of each CRD created before it is deleted")
	f.StringVar(&cfg.Kubectl, "kubectl", cfg.Kubectl, "kubectl binary to run")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "longest wait for each stage but openapi")
	f.DurationVar(&cfg.OpenAPITimeout, "openapi-timeout", cfg.OpenAPITimeout, "longest wait for /openapi/v3 to list a CRD's group version")
	f.DurationVar(&cfg.Poll, "poll", cfg.Poll, "interval of the API polls (kubectl runs back to back)")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "longest wait for the hub to be ready")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "how long the hub gets to exit after SIGTERM before it is killed")
	f.StringVar(&out, "out", "bench-results/api-crd.json", "file to write the results to as JSON")
	f.BoolVar(&quick, "quick", false, "3 CRDs, for a smoke run (flags given explicitly still apply)")
	return cmd
}

// crdConfig sets what `outpost bench api crd` measures. Durations encode
// in JSON as nanoseconds.
type crdConfig struct {
	Binary    string `json:"-"`
	Dir       string `json:"dir,omitempty"`
	Namespace string `json:"namespace"`
	// CRDs is how many are created, one after the other: 10.
	CRDs int `json:"crds"`
	// Objects is how many objects each CRD holds when deleted: 3.
	Objects int    `json:"objects"`
	Kubectl string `json:"kubectl"`
	// Timeout bounds each stage but openapi: 30s. OpenAPITimeout bounds
	// openapi, which the hub may never reach: 2s.
	Timeout        time.Duration `json:"timeout_ns"`
	OpenAPITimeout time.Duration `json:"openapi_timeout_ns"`
	// Poll is the interval of the API polls: 10ms.
	Poll         time.Duration `json:"poll_ns"`
	ReadyTimeout time.Duration `json:"ready_timeout_ns"`
	StopTimeout  time.Duration `json:"stop_timeout_ns"`
}

// defaultKubectl is the kubectl the benchmark runs unless told otherwise.
const defaultKubectl = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33"

// defaultCRDConfig returns the defaults above.
func defaultCRDConfig() crdConfig {
	return crdConfig{
		Namespace:      "bench",
		CRDs:           10,
		Objects:        3,
		Kubectl:        defaultKubectl,
		Timeout:        30 * time.Second,
		OpenAPITimeout: 2 * time.Second,
		Poll:           10 * time.Millisecond,
		ReadyTimeout:   60 * time.Second,
		StopTimeout:    30 * time.Second,
	}
}

// maxCRDs bounds CRDs so that their names keep three digits.
const maxCRDs = 1000

// validate reports the first invalid field.
func (c crdConfig) validate() error {
	switch {
	case c.Binary == "":
		return errors.New("no outpost binary to run the hub with")
	case c.Namespace == "":
		return errors.New("namespace is empty")
	case c.CRDs < 1 || c.CRDs > maxCRDs:
		return fmt.Errorf("CRD count %d is not between 1 and %d", c.CRDs, maxCRDs)
	case c.Objects < 0:
		return fmt.Errorf("object count %d is negative", c.Objects)
	case c.Kubectl == "":
		return errors.New("no kubectl to run")
	case c.Timeout <= 0 || c.OpenAPITimeout <= 0:
		return fmt.Errorf("timeouts %v and %v are not both positive", c.Timeout, c.OpenAPITimeout)
	case c.Poll <= 0:
		return fmt.Errorf("poll interval %v is not positive", c.Poll)
	case c.ReadyTimeout <= 0:
		return fmt.Errorf("ready timeout %v is not positive", c.ReadyTimeout)
	case c.StopTimeout <= 0:
		return fmt.Errorf("stop timeout %v is not positive", c.StopTimeout)
	}
	return nil
}

// The stages timed, from a CRD's create or its delete.
const (
	stageEstablished = "established"
	stageDiscovery   = "discovery lists it"
	stageOpenAPI     = "/openapi/v3 lists it"
	stageKubectl     = "kubectl get KIND works"
	stageObjectsGone = "its objects gone"
	stageCRDGone     = "CRD gone"
	stageUndiscover  = "discovery drops it"
)

// createStages and deleteStages are the stages in the order reported.
var (
	createStages = []string{stageEstablished, stageDiscovery, stageOpenAPI, stageKubectl}
	deleteStages = []string{stageObjectsGone, stageCRDGone, stageUndiscover}
)

// stageTime is when a stage was reached, from its create or delete.
type stageTime struct {
	Reached bool          `json:"reached"`
	After   time.Duration `json:"after_ns,omitempty"`
	// Error is the last reason it was not reached, if it was not.
	Error string `json:"error,omitempty"`
}

// crdResult is one CRD's stages.
type crdResult struct {
	Name   string               `json:"name"`
	Stages map[string]stageTime `json:"stages"`
	// KubectlRuns counts the kubectl runs until one succeeded;
	// KubectlLast is how long that one took.
	KubectlRuns int           `json:"kubectl_runs"`
	KubectlLast time.Duration `json:"kubectl_last_ns"`
}

// stageSummary is a stage over every CRD: how many reached it, and when.
type stageSummary struct {
	Stage   string        `json:"stage"`
	Reached int           `json:"reached"`
	Min     time.Duration `json:"min_ns"`
	Median  time.Duration `json:"median_ns"`
	Max     time.Duration `json:"max_ns"`
}

// crdReport is what `outpost bench api crd` measured.
type crdReport struct {
	Machine report.Machine `json:"machine"`
	Config  crdConfig      `json:"config"`
	CRDs    []crdResult    `json:"crds"`
	Summary []stageSummary `json:"summary"`
	// Discovery*Bytes are the sizes of the aggregated discovery document
	// of /apis, in JSON, before the creates, after them and after the
	// deletes.
	DiscoveryBeforeBytes  int `json:"discovery_before_bytes"`
	DiscoveryCreatedBytes int `json:"discovery_created_bytes"`
	DiscoveryDeletedBytes int `json:"discovery_deleted_bytes"`
	// KubectlFloor is the median of three cold `kubectl get configmaps`,
	// before any CRD: what the kubectl stage cannot be under.
	KubectlFloor time.Duration    `json:"kubectl_floor_ns"`
	Hub          string           `json:"hub_exit"`
	Load         []report.LoadAvg `json:"load"`
}

// crdBench is one run: the hub's clients and where kubectl's homes go.
type crdBench struct {
	cfg        crdConfig
	kubeconfig string
	tmp        string // kubectl's homes and cache dirs
	http       *http.Client
	host       string
	ext        apiextensionsclient.Interface
	dyn        dynamic.Interface
}

// runCRDBench starts a hub, creates and deletes cfg.CRDs CRDs against
// it, timing each, and stops the hub.
func runCRDBench(ctx context.Context, cfg crdConfig, progress io.Writer) (rep *crdReport, err error) {
	if _, err := exec.LookPath(cfg.Kubectl); err != nil {
		return nil, fmt.Errorf("kubectl %s: %w (set --kubectl)", cfg.Kubectl, err)
	}
	rep = &crdReport{Config: cfg, Load: []report.LoadAvg{report.ReadLoadAvg("start")}}
	fmt.Fprint(progress, "starting hub ... ")
	hub, err := startBenchHub(ctx, cfg.Binary, cfg.Dir, true, cfg.ReadyTimeout)
	if err != nil {
		fmt.Fprintln(progress, "failed")
		return nil, err
	}
	fmt.Fprintln(progress, "ready")
	defer func() { rep.Hub = hub.stop(cfg.StopTimeout) }()
	b, err := newCRDBench(cfg, hub)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(b.tmp)
	restCfg, err := benchRESTConfig(hub.kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := createNamespace(ctx, restCfg, cfg.Namespace); err != nil {
		return nil, err
	}
	if rep.DiscoveryBeforeBytes, err = b.discoverySize(ctx); err != nil {
		return nil, err
	}
	fmt.Fprint(progress, "cold kubectl get configmaps, 3 times ... ")
	if rep.KubectlFloor, err = b.kubectlFloor(ctx); err != nil {
		fmt.Fprintln(progress, "failed")
		return nil, err
	}
	fmt.Fprintln(progress, report.Duration(rep.KubectlFloor))

	rep.CRDs = make([]crdResult, cfg.CRDs)
	for i := range rep.CRDs {
		fmt.Fprintf(progress, "creating CRD %d of %d ... ", i+1, cfg.CRDs)
		rep.CRDs[i] = b.create(ctx, i)
		fmt.Fprintln(progress, stagesLine(rep.CRDs[i], createStages))
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if rep.DiscoveryCreatedBytes, err = b.discoverySize(ctx); err != nil {
		return nil, err
	}
	for i := range rep.CRDs {
		fmt.Fprintf(progress, "deleting CRD %d of %d with %d objects ... ", i+1, cfg.CRDs, cfg.Objects)
		if err := b.delete(ctx, i, &rep.CRDs[i]); err != nil {
			fmt.Fprintln(progress, "failed")
			return nil, err
		}
		fmt.Fprintln(progress, stagesLine(rep.CRDs[i], deleteStages))
	}
	if rep.DiscoveryDeletedBytes, err = b.discoverySize(ctx); err != nil {
		return nil, err
	}
	rep.Summary = summarizeStages(rep.CRDs, append(slices.Clone(createStages), deleteStages...))
	rep.Load = append(rep.Load, report.ReadLoadAvg("end"))
	rep.Machine = report.DescribeMachine()
	return rep, nil
}

// newCRDBench returns the clients of a run against hub.
func newCRDBench(cfg crdConfig, hub *benchHub) (*crdBench, error) {
	restCfg, err := benchRESTConfig(hub.kubeconfig)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		return nil, fmt.Errorf("http client: %w", err)
	}
	ext, err := apiextensionsclient.NewForConfigAndClient(restCfg, hc)
	if err != nil {
		return nil, fmt.Errorf("apiextensions client: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(restCfg, hc)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	tmp, err := os.MkdirTemp(cfg.Dir, "outpost-bench-kubectl-")
	if err != nil {
		return nil, fmt.Errorf("kubectl homes: %w", err)
	}
	return &crdBench{cfg: cfg, kubeconfig: hub.kubeconfig, tmp: tmp, http: hc,
		host: strings.TrimSuffix(restCfg.Host, "/"), ext: ext, dyn: dyn}, nil
}

// stagesLine returns a progress line of r's stages.
func stagesLine(r crdResult, stages []string) string {
	parts := make([]string, 0, len(stages))
	for _, s := range stages {
		parts = append(parts, s+" "+stageCell(r.Stages[s]))
	}
	return strings.Join(parts, ", ")
}

// stageCell formats when a stage was reached, or that it was not.
func stageCell(t stageTime) string {
	if !t.Reached {
		return "not reached"
	}
	return report.Duration(t.After)
}

// benchCRDNames returns the group, kind and plural of the i-th CRD: a
// group and kind of its own.
func benchCRDNames(i int) (group, kind, plural string) {
	return fmt.Sprintf("g%03d.crdbench.outpost.dev", i), fmt.Sprintf("Widget%03d", i), fmt.Sprintf("widget%03ds", i)
}

// benchCRD returns the i-th CRD: namespaced, one version with a small
// structural schema.
func benchCRD(i int) *apiextensionsv1.CustomResourceDefinition {
	group, kind, plural := benchCRDNames(i)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size":  {Type: "integer"},
							"color": {Type: "string"},
						}},
					},
				}},
			}},
		},
	}
}

// create creates the i-th CRD and times its create stages, which are
// polled at once.
func (b *crdBench) create(ctx context.Context, i int) crdResult {
	group, kind, plural := benchCRDNames(i)
	crd := benchCRD(i)
	r := crdResult{Name: crd.Name, Stages: map[string]stageTime{}}
	start := time.Now()
	if _, err := b.ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		for _, s := range createStages {
			r.Stages[s] = stageTime{Error: "create: " + err.Error()}
		}
		return r
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	set := func(stage string, t stageTime) {
		mu.Lock()
		r.Stages[stage] = t
		mu.Unlock()
	}
	wg.Go(func() {
		set(stageEstablished, b.until(ctx, start, b.cfg.Timeout, b.cfg.Poll, func() error { return b.established(ctx, crd.Name) }))
	})
	wg.Go(func() {
		set(stageDiscovery, b.until(ctx, start, b.cfg.Timeout, b.cfg.Poll, func() error {
			return b.discoveryLists(ctx, group, plural, true)
		}))
	})
	wg.Go(func() {
		set(stageOpenAPI, b.until(ctx, start, b.cfg.OpenAPITimeout, b.cfg.Poll, func() error { return b.openAPILists(ctx, group) }))
	})
	wg.Go(func() {
		runs, last := 0, time.Duration(0)
		t := b.until(ctx, start, b.cfg.Timeout, 0, func() error {
			runs++
			t0 := time.Now()
			err := b.kubectlGet(ctx, kind)
			last = time.Since(t0)
			return err
		})
		mu.Lock()
		r.KubectlRuns, r.KubectlLast = runs, last
		mu.Unlock()
		set(stageKubectl, t)
	})
	wg.Wait()
	return r
}

// delete gives the i-th CRD its objects, deletes it, and times its
// delete stages into r.
func (b *crdBench) delete(ctx context.Context, i int, r *crdResult) error {
	group, _, plural := benchCRDNames(i)
	crd := benchCRD(i)
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	res := b.dyn.Resource(gvr).Namespace(b.cfg.Namespace)
	for j := range b.cfg.Objects {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/v1",
			"kind":       crd.Spec.Names.Kind,
			"metadata":   map[string]any{"name": fmt.Sprintf("obj-%d", j)},
			"spec":       map[string]any{"size": int64(j), "color": "blue"},
		}}
		if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s object: %w", crd.Name, err)
		}
	}
	start := time.Now()
	if err := b.ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete CRD %s: %w", crd.Name, err)
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	set := func(stage string, t stageTime) {
		mu.Lock()
		r.Stages[stage] = t
		mu.Unlock()
	}
	wg.Go(func() {
		set(stageObjectsGone, b.until(ctx, start, b.cfg.Timeout, b.cfg.Poll, func() error {
			list, err := res.List(ctx, metav1.ListOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return nil
			case err != nil:
				return err
			case len(list.Items) > 0:
				return fmt.Errorf("%d objects left", len(list.Items))
			}
			return nil
		}))
	})
	wg.Go(func() {
		set(stageCRDGone, b.until(ctx, start, b.cfg.Timeout, b.cfg.Poll, func() error {
			_, err := b.ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err == nil {
				return errors.New("still there")
			}
			return err
		}))
	})
	wg.Go(func() {
		set(stageUndiscover, b.until(ctx, start, b.cfg.Timeout, b.cfg.Poll, func() error {
			return b.discoveryLists(ctx, group, plural, false)
		}))
	})
	wg.Wait()
	return nil
}

// until calls try every interval (back to back for 0) until it returns
// nil or timeout has passed since start, and says when, from start, it
// returned nil.
func (b *crdBench) until(ctx context.Context, start time.Time, timeout, interval time.Duration, try func() error) stageTime {
	deadline := start.Add(timeout)
	for {
		err := try()
		if err == nil {
			return stageTime{Reached: true, After: time.Since(start)}
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return stageTime{Error: err.Error()}
		}
		if interval > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}
}

// established returns nil once the CRD's Established condition is True.
func (b *crdBench) established(ctx context.Context, name string) error {
	crd, err := b.ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return nil
		}
	}
	return errors.New("not established")
}

// maxDocumentBytes bounds the documents read from the hub.
const maxDocumentBytes = 64 << 20

// aggregatedAccept asks for the aggregated discovery document, v2, as
// client-go does.
const aggregatedAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// get returns the body of GET path with accept, failing on a status other
// than 200.
func (b *crdBench) get(ctx context.Context, path, accept string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.host+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(body) > maxDocumentBytes {
		return nil, fmt.Errorf("%s is over %d bytes", path, maxDocumentBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return body, nil
}

// discovery returns the aggregated discovery document of /apis, and its
// size.
func (b *crdBench) discovery(ctx context.Context) (*apidiscoveryv2.APIGroupDiscoveryList, int, error) {
	body, err := b.get(ctx, "/apis", aggregatedAccept)
	if err != nil {
		return nil, 0, err
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, 0, fmt.Errorf("decode aggregated discovery: %w", err)
	}
	if list.Kind != "APIGroupDiscoveryList" {
		return nil, 0, fmt.Errorf("/apis returned %q, not the aggregated APIGroupDiscoveryList", list.Kind)
	}
	return &list, len(body), nil
}

// discoverySize returns the size of the aggregated discovery document.
func (b *crdBench) discoverySize(ctx context.Context) (int, error) {
	_, n, err := b.discovery(ctx)
	return n, err
}

// discoveryLists returns nil once aggregated discovery lists plural in
// group's v1 if want, or no longer does if not.
func (b *crdBench) discoveryLists(ctx context.Context, group, plural string, want bool) error {
	list, _, err := b.discovery(ctx)
	if err != nil {
		return err
	}
	if listsResource(list, group, plural) == want {
		return nil
	}
	if want {
		return errors.New("not listed")
	}
	return errors.New("still listed")
}

// listsResource reports whether list has plural in group's v1.
func listsResource(list *apidiscoveryv2.APIGroupDiscoveryList, group, plural string) bool {
	for _, g := range list.Items {
		if g.Name != group {
			continue
		}
		for _, v := range g.Versions {
			if v.Version != "v1" {
				continue
			}
			for _, r := range v.Resources {
				if r.Resource == plural {
					return true
				}
			}
		}
	}
	return false
}

// openAPILists returns nil once /openapi/v3 lists group's v1.
func (b *crdBench) openAPILists(ctx context.Context, group string) error {
	body, err := b.get(ctx, "/openapi/v3", "application/json")
	if err != nil {
		return err
	}
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("decode /openapi/v3: %w", err)
	}
	if _, ok := doc.Paths["apis/"+group+"/v1"]; !ok {
		return fmt.Errorf("apis/%s/v1 not listed among %d group versions", group, len(doc.Paths))
	}
	return nil
}

// kubectlGet runs `kubectl get resource` in the namespace with an empty
// HOME and cache dir, so that kubectl discovers the API afresh.
func (b *crdBench) kubectlGet(ctx context.Context, resource string) error {
	home, err := os.MkdirTemp(b.tmp, "home-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, b.cfg.Kubectl, "--kubeconfig", b.kubeconfig, "--cache-dir", home+"/cache",
		"get", resource, "-n", b.cfg.Namespace)
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl get %s: %w: %s", resource, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// kubectlFloor returns the median of three cold `kubectl get configmaps`.
func (b *crdBench) kubectlFloor(ctx context.Context) (time.Duration, error) {
	var ds []time.Duration
	for range 3 {
		t0 := time.Now()
		if err := b.kubectlGet(ctx, "configmaps"); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds)
	return ds[1], nil
}

// summarizeStages returns each stage's count reached and min, median and
// max over the CRDs that reached it.
func summarizeStages(rs []crdResult, stages []string) []stageSummary {
	out := make([]stageSummary, 0, len(stages))
	for _, s := range stages {
		var ds []time.Duration
		for _, r := range rs {
			if t := r.Stages[s]; t.Reached {
				ds = append(ds, t.After)
			}
		}
		sum := stageSummary{Stage: s, Reached: len(ds)}
		if len(ds) > 0 {
			slices.Sort(ds)
			sum.Min, sum.Median, sum.Max = ds[0], ds[(len(ds)-1)/2], ds[len(ds)-1]
		}
		out = append(out, sum)
	}
	return out
}

// Render writes the stage table, the discovery sizes, the errors of
// stages not reached, and the machine.
func (r *crdReport) Render(w io.Writer) error {
	var b strings.Builder
	c := r.Config
	b.WriteString("API benchmark: the cost of a CustomResourceDefinition, against a hub in a child process\n\n")
	tb := report.NewTable(fmt.Sprintf("%d CRDs, one after the other; times from each create, then from each delete", c.CRDs),
		"stage", "reached", "min", "median", "max")
	for _, s := range r.Summary {
		row := []string{s.Stage, fmt.Sprintf("%d/%d", s.Reached, c.CRDs), "-", "-", "-"}
		if s.Reached > 0 {
			row[2], row[3], row[4] = report.Duration(s.Min), report.Duration(s.Median), report.Duration(s.Max)
		}
		if s.Stage == stageObjectsGone {
			row[0] = fmt.Sprintf("%s (%d each)", s.Stage, c.Objects)
		}
		tb.AddRow(row...)
	}
	b.WriteString(tb.String())
	runs := make([]int, 0, len(r.CRDs))
	for _, x := range r.CRDs {
		runs = append(runs, x.KubectlRuns)
	}
	fmt.Fprintf(&b, "\nkubectl: %s, cold (empty HOME and --cache-dir) every run; a cold `kubectl get configmaps` takes %s (median of 3), the floor of its stage; runs until one succeeded, per CRD: %v.\n",
		c.Kubectl, report.Duration(r.KubectlFloor), runs)
	fmt.Fprintf(&b, "openapi waited at most %v, the other stages at most %v; the API was polled every %v.\n", c.OpenAPITimeout, c.Timeout, c.Poll)
	dt := report.NewTable("\naggregated discovery (/apis, apidiscovery.k8s.io/v2, JSON)", "when", "size", "per CRD")
	dt.AddRow("before", report.Bytes(uint64(r.DiscoveryBeforeBytes)), "")
	dt.AddRow(fmt.Sprintf("after %d creates", c.CRDs), report.Bytes(uint64(r.DiscoveryCreatedBytes)),
		report.Bytes(uint64(max(r.DiscoveryCreatedBytes-r.DiscoveryBeforeBytes, 0)/c.CRDs)))
	dt.AddRow("after the deletes", report.Bytes(uint64(r.DiscoveryDeletedBytes)), "")
	b.WriteString(dt.String())
	for _, stage := range append(slices.Clone(createStages), deleteStages...) {
		var missed []crdResult
		for _, x := range r.CRDs {
			if !x.Stages[stage].Reached {
				missed = append(missed, x)
			}
		}
		if len(missed) > 0 {
			fmt.Fprintf(&b, "%s: not reached by %d of %d CRDs; for %s: %s\n", stage, len(missed), c.CRDs, missed[0].Name, missed[0].Stages[stage].Error)
		}
	}
	fmt.Fprintf(&b, "hub (controllers on) stopped: %s\n", r.Hub)
	report.WriteLoad(&b, r.Load)
	b.WriteString("\nmachine\n")
	b.WriteString(r.Machine.String())
	_, err := io.WriteString(w, b.String())
	return err
}
