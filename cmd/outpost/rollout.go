package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	fwv1 "github.com/outpost-mesh/outpost/firmware/apis/v1"
	"github.com/outpost-mesh/outpost/firmware/rollout"
)

// The firmware resources `outpost rollout` reads and writes.
var (
	rolloutsGVR = fwv1.SchemeGroupVersion.WithResource("rollouts")
	releasesGVR = fwv1.SchemeGroupVersion.WithResource("releases")
)

// progressBarWidth is the number of cells of a status progress bar.
const progressBarWidth = 12

// newRolloutCmd returns `outpost rollout`, which makes, follows, pauses
// and resumes over-the-air rollouts.
func newRolloutCmd() *cobra.Command {
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Create, follow, pause and resume over-the-air rollouts of a release",
		Long: `Manage Rollouts (firmware.outpost.dev/v1): a release offered to the
nodes a selector and a list of sites pick, wave by wave, each node watched for
a health window, stopping when the failure budget trips. kubectl drives them
as well: kubectl get rollouts, kubectl patch rollout NAME --type=merge -p
'{"spec":{"paused":true}}'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "",
		"admin kubeconfig of the hub (default $KUBECONFIG, else "+defaultKubeconfig+")")
	cmd.AddCommand(newRolloutCreateCmd(&kubeconfig), newRolloutStatusCmd(&kubeconfig),
		newRolloutPauseCmd(&kubeconfig, true), newRolloutPauseCmd(&kubeconfig, false))
	return cmd
}

// dynamicClient returns a dynamic client of the hub the kubeconfig at
// path names, found as the other subcommands find it.
func dynamicClient(path string) (dynamic.Interface, error) {
	_, cfg, err := adminClient(path)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub client: %w", err)
	}
	return dyn, nil
}

// rolloutCreate is what `outpost rollout create` is asked to make.
type rolloutCreate struct {
	release, selector, waves, budget, onFailure string
	sites, windows                              []string
	healthWindow                                time.Duration
	paused                                      bool
}

func newRolloutCreateCmd(kubeconfig *string) *cobra.Command {
	var o rolloutCreate
	cmd := &cobra.Command{
		Use:   "create NAME --release RELEASE --waves 1,50%,100% [flags]",
		Short: "Create a Rollout of a release over the nodes a selector and sites pick",
		Example: `  outpost rollout create agent-1-4 --release agent-1-4 --selector tier=gateway --waves 1,50%,100%
  outpost rollout create fw-2 --release fw-2 --site berlin-3 --site paris-1 --waves 1,5%,25%,100% \
      --health-window 10m --failure-budget 2,10%,20 --on-failure revert --paused
  outpost rollout create agent-1-5 --release agent-1-5 --maintenance-window 'Mon-Fri 01:00-05:00'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ro, err := o.build(args[0])
			if err != nil {
				return err
			}
			dyn, err := dynamicClient(*kubeconfig)
			if err != nil {
				return err
			}
			return createRollout(cmd.Context(), dyn, ro, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.flags(cmd.Flags())
	return cmd
}

// flags registers o's flags on f.
func (o *rolloutCreate) flags(f *pflag.FlagSet) {
	f.StringVar(&o.release, "release", "", "the Release to roll out (required)")
	f.StringVar(&o.selector, "selector", "", "node label selector, KEY=VALUE,... (default every node)")
	f.StringArrayVar(&o.sites, "site", nil, "a site whose nodes the rollout takes (repeatable; default every site)")
	f.StringVar(&o.waves, "waves", "100%", "cumulative wave targets, counts or percentages of the nodes, such as 1,50%,100%")
	f.DurationVar(&o.healthWindow, "health-window", rollout.DefaultHealthWindow, "how long an updated node must stay healthy")
	f.StringVar(&o.budget, "failure-budget", "", "failed nodes that stop the rollout: COUNT, PERCENT%, and a minimum sample, such as 1,10% or 1,10%,20 (min=20 also reads); default none")
	f.StringVar(&o.onFailure, "on-failure", "pause", "what a tripped failure budget does: pause, or revert the updated nodes")
	f.StringArrayVar(&o.windows, "maintenance-window", nil, "when nodes may be offered the release, in each node's own time zone (its --timezone): [DAYS ]HH:MM-HH:MM, such as 01:00-05:00, Mon-Fri 22:00-04:00 or Sat,Sun 00:00-06:00 (repeatable; default any time)")
	f.BoolVar(&o.paused, "paused", false, "create the rollout paused")
}

// dayOrder are the days of a --maintenance-window range, in order.
var dayOrder = []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}

// parseMaintenanceWindow reads a --maintenance-window: "HH:MM-HH:MM",
// after days as "Mon,Wed", "Mon-Fri" or "Fri-Mon"; the times are checked
// with the rest of the spec.
func parseMaintenanceWindow(s string) (fwv1.MaintenanceWindow, error) {
	var w fwv1.MaintenanceWindow
	fields := strings.Fields(s)
	if len(fields) == 0 || len(fields) > 2 {
		return w, fmt.Errorf("%q: want [DAYS ]HH:MM-HH:MM, such as Mon-Fri 01:00-05:00", s)
	}
	times := fields[len(fields)-1]
	start, end, ok := strings.Cut(times, "-")
	if !ok {
		return w, fmt.Errorf("%q: want HH:MM-HH:MM, such as 01:00-05:00", times)
	}
	w.Start, w.End = start, end
	if len(fields) == 1 {
		return w, nil
	}
	day := func(d string) (int, error) {
		if i := slices.Index(dayOrder, d); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("%q: day %q, want Mon, Tue, Wed, Thu, Fri, Sat or Sun", s, d)
	}
	for part := range strings.SplitSeq(fields[0], ",") {
		from, to, isRange := strings.Cut(part, "-")
		i, err := day(from)
		if err != nil {
			return w, err
		}
		j := i
		if isRange {
			if j, err = day(to); err != nil {
				return w, err
			}
		}
		for k := i; ; k = (k + 1) % len(dayOrder) {
			if !slices.Contains(w.Days, dayOrder[k]) {
				w.Days = append(w.Days, dayOrder[k])
			}
			if k == j {
				break
			}
		}
	}
	return w, nil
}

// build returns the Rollout o describes, checked as the hub's planner
// checks it, or the first thing wrong with o.
func (o *rolloutCreate) build(name string) (*fwv1.Rollout, error) {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("invalid name %q: %s", name, strings.Join(errs, "; "))
	}
	if o.release == "" {
		return nil, errors.New("--release is required")
	}
	steps, err := rollout.ParseWaves(o.waves)
	if err != nil {
		return nil, fmt.Errorf("--waves: %w", err)
	}
	var budget rollout.Budget
	if o.budget != "" {
		if budget, err = rollout.ParseBudget(budgetTerms(o.budget)); err != nil {
			return nil, fmt.Errorf("--failure-budget: %w", err)
		}
	}
	var action rollout.Action
	switch strings.ToLower(o.onFailure) {
	case "pause", "":
		action = rollout.Pause
	case "revert":
		action = rollout.Revert
	default:
		return nil, fmt.Errorf("--on-failure %q: want pause or revert", o.onFailure)
	}
	spec := rollout.Spec{Waves: steps, HealthWindow: o.healthWindow, Budget: budget, OnTrip: action,
		Paused: o.paused, Version: "release " + o.release}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if o.healthWindow == 0 {
		return nil, errors.New("--health-window: must be positive")
	}
	ro := &fwv1.Rollout{
		TypeMeta:   metav1.TypeMeta{APIVersion: fwv1.SchemeGroupVersion.String(), Kind: "Rollout"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fwv1.RolloutSpec{
			Release:      o.release,
			HealthWindow: &metav1.Duration{Duration: o.healthWindow},
			FailureBudget: fwv1.FailureBudget{Count: int32(budget.Count), Percent: int32(budget.Percent),
				MinSample: int32(budget.MinSample)},
			OnFailure: fwv1.FailureAction(action),
			Paused:    o.paused,
		},
	}
	for _, st := range steps {
		ro.Spec.Waves = append(ro.Spec.Waves, st.String())
	}
	for _, s := range o.windows {
		w, err := parseMaintenanceWindow(s)
		if err != nil {
			return nil, fmt.Errorf("--maintenance-window %w", err)
		}
		ro.Spec.MaintenanceWindows = append(ro.Spec.MaintenanceWindows, w)
	}
	for _, s := range o.sites {
		if errs := validation.IsValidLabelValue(s); len(errs) > 0 || s == "" {
			return nil, fmt.Errorf("--site %q: not a site name", s)
		}
		ro.Spec.Sites = append(ro.Spec.Sites, s)
	}
	if o.selector != "" {
		sel, err := metav1.ParseToLabelSelector(o.selector)
		if err != nil {
			return nil, fmt.Errorf("--selector: %w", err)
		}
		ro.Spec.NodeSelector = sel
	}
	if _, err := ro.Spec.PlannerSpec(spec.Version); err != nil {
		return nil, err
	}
	return ro, nil
}

// budgetTerms returns s in ParseBudget's terms: a bare third number, as in
// 1,10%,20, is the minimum sample.
func budgetTerms(s string) string {
	terms := strings.Split(s, ",")
	if len(terms) == 3 {
		last := strings.TrimSpace(terms[2])
		if _, err := strconv.Atoi(last); err == nil {
			terms[2] = "min=" + last
		}
	}
	return strings.Join(terms, ",")
}

// createRollout creates ro and says so, warning when its release is not
// (yet) there.
func createRollout(ctx context.Context, dyn dynamic.Interface, ro *fwv1.Rollout, out, errOut io.Writer) error {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ro)
	if err != nil {
		return err
	}
	if _, err := dyn.Resource(releasesGVR).Get(ctx, ro.Spec.Release, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		fmt.Fprintf(errOut, "warning: release %s does not exist yet; the rollout waits for it\n", ro.Spec.Release)
	}
	if _, err := dyn.Resource(rolloutsGVR).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create rollout %s: %w", ro.Name, err)
	}
	state := ""
	if ro.Spec.Paused {
		state = " (paused: resume with `outpost rollout resume " + ro.Name + "`)"
	}
	fmt.Fprintf(out, "rollout %s created: release %s, waves %s%s\n", ro.Name, ro.Spec.Release, strings.Join(ro.Spec.Waves, ","), state)
	return nil
}

func newRolloutStatusCmd(kubeconfig *string) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "status NAME [--watch]",
		Short: "Show a rollout's progress wave by wave, its conditions and its failed nodes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dyn, err := dynamicClient(*kubeconfig)
			if err != nil {
				return err
			}
			ctx, name, w := cmd.Context(), args[0], cmd.OutOrStdout()
			ro, err := getRollout(ctx, dyn, name)
			if err != nil {
				return err
			}
			if err := renderRolloutStatus(w, ro, releaseVersion(ctx, dyn, ro.Spec.Release)); err != nil || !follow {
				return err
			}
			return watchRollout(ctx, dyn, ro, w)
		},
	}
	cmd.Flags().BoolVarP(&follow, "watch", "w", false, "print the status again at each change, until the rollout completes")
	return cmd
}

// getRollout reads the Rollout name.
func getRollout(ctx context.Context, dyn dynamic.Interface, name string) (*fwv1.Rollout, error) {
	u, err := dyn.Resource(rolloutsGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get rollout %s: %w", name, err)
	}
	return decodeRollout(u)
}

func decodeRollout(u *unstructured.Unstructured) (*fwv1.Rollout, error) {
	var ro fwv1.Rollout
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ro); err != nil {
		return nil, fmt.Errorf("rollout %s: %w", u.GetName(), err)
	}
	return &ro, nil
}

// releaseVersion returns the version of release name, "" when it cannot
// be read.
func releaseVersion(ctx context.Context, dyn dynamic.Interface, name string) string {
	u, err := dyn.Resource(releasesGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	v, _, _ := unstructured.NestedString(u.Object, "spec", "version")
	return v
}

// watchRollout prints ro's status at each change until it completes or
// ctx ends.
func watchRollout(ctx context.Context, dyn dynamic.Interface, ro *fwv1.Rollout, w io.Writer) error {
	version := releaseVersion(ctx, dyn, ro.Spec.Release)
	rv := ro.ResourceVersion
	for !meta.IsStatusConditionTrue(ro.Status.Conditions, rollout.ConditionComplete) {
		wi, err := dyn.Resource(rolloutsGVR).Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", ro.Name).String(), ResourceVersion: rv,
		})
		if err != nil {
			return fmt.Errorf("watch rollout %s: %w", ro.Name, err)
		}
		for ev := range wi.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			switch {
			case ev.Type == watch.Deleted:
				wi.Stop()
				return fmt.Errorf("rollout %s was deleted", ro.Name)
			case ev.Type == watch.Error || !ok:
				wi.Stop()
				rv = "" // expired: start again from now
				continue
			}
			next, err := decodeRollout(u)
			if err != nil {
				wi.Stop()
				return err
			}
			rv = next.ResourceVersion
			if next.Generation == ro.Generation && equalStatus(next.Status, ro.Status) {
				continue
			}
			ro = next
			fmt.Fprintln(w)
			if err := renderRolloutStatus(w, ro, version); err != nil {
				wi.Stop()
				return err
			}
			if meta.IsStatusConditionTrue(ro.Status.Conditions, rollout.ConditionComplete) {
				break
			}
		}
		wi.Stop()
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

// equalStatus reports whether a and b show the same.
func equalStatus(a, b fwv1.RolloutStatus) bool {
	var sa, sb strings.Builder
	renderStatusBody(&sa, a)
	renderStatusBody(&sb, b)
	return sa.String() == sb.String()
}

// renderRolloutStatus prints ro as `outpost rollout status` shows it;
// version is its release's, "" when unknown.
func renderRolloutStatus(w io.Writer, ro *fwv1.Rollout, version string) error {
	var b strings.Builder
	rel := ro.Spec.Release
	if version != "" {
		rel += " (" + version + ")"
	}
	waves := ro.Spec.Waves
	if len(waves) == 0 {
		waves = fwv1.DefaultWaves
	}
	hw := rollout.DefaultHealthWindow
	if ro.Spec.HealthWindow != nil {
		hw = ro.Spec.HealthWindow.Duration
	}
	budget := rollout.Budget{Count: int(ro.Spec.FailureBudget.Count), Percent: int(ro.Spec.FailureBudget.Percent),
		MinSample: int(ro.Spec.FailureBudget.MinSample)}
	onFailure := ro.Spec.OnFailure
	if onFailure == "" {
		onFailure = fwv1.FailurePause
	}
	fmt.Fprintf(&b, "rollout %s: release %s, waves %s, health window %v, failure budget %s, on failure %s\n",
		ro.Name, rel, strings.Join(waves, ","), hw, budget, onFailure)
	if ro.Spec.Paused {
		b.WriteString("paused (spec.paused): `outpost rollout resume " + ro.Name + "` resumes it\n")
	}
	renderStatusBody(&b, ro.Status)
	lines := strings.SplitAfter(b.String(), "\n")
	for i, l := range lines {
		if trimmed, ok := strings.CutSuffix(l, "\n"); ok {
			lines[i] = strings.TrimRight(trimmed, " ") + "\n" // tabwriter pads empty last cells
		}
	}
	_, err := io.WriteString(w, strings.Join(lines, ""))
	return err
}

// renderStatusBody prints the progress, waves, conditions and failed
// nodes of st.
func renderStatusBody(b *strings.Builder, st fwv1.RolloutStatus) {
	total := int(st.Updated + st.Failed + st.Pending)
	fmt.Fprintf(b, "wave %d/%d %s %d/%d updated, %d failed, %d pending\n",
		st.Wave, len(st.Waves), bar(int(st.Updated), int(st.Failed), total), st.Updated, total, st.Failed, st.Pending)
	if len(st.Waves) > 0 {
		tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  WAVE\tTARGET\tNODES\tUPDATED\tHEALTHY\tFAILED\tIN PROGRESS\tPENDING\tOFFLINE\tSTARTED")
		for i, ws := range st.Waves {
			started := "-"
			if ws.Started != nil {
				started = ws.Started.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "  %d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", i+1, ws.Target, ws.Nodes, ws.Updated,
				ws.Healthy, ws.Failed, ws.InProgress, ws.Pending, ws.Offline, started)
		}
		tw.Flush()
	}
	if len(st.Conditions) > 0 {
		b.WriteString("conditions:\n")
		tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
		for _, c := range st.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
		}
		tw.Flush()
	}
	var failed []fwv1.NodeStatus
	for _, ns := range st.Nodes {
		if ns.State == string(rollout.Failed) || ns.State == string(rollout.Reverted) {
			failed = append(failed, ns)
		}
	}
	if len(failed) > 0 {
		b.WriteString("failed nodes:\n")
		tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
		for _, ns := range failed {
			why := ns.Reason
			if ns.Message != "" {
				why += ": " + ns.Message
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", ns.Name, ns.State, why)
		}
		tw.Flush()
	}
}

// bar returns a progress bar of progressBarWidth cells: '#' for the
// updated share of total, 'x' for the failed share, '-' for the rest.
func bar(updated, failed, total int) string {
	cells := make([]byte, progressBarWidth)
	for i := range cells {
		cells[i] = '-'
	}
	if total > 0 {
		u := updated * progressBarWidth / total
		f := (updated + failed) * progressBarWidth / total
		for i := range cells {
			switch {
			case i < u:
				cells[i] = '#'
			case i < f:
				cells[i] = 'x'
			}
		}
	}
	return "[" + string(cells) + "]"
}

func newRolloutPauseCmd(kubeconfig *string, pause bool) *cobra.Command {
	use, short := "pause NAME", "Pause a rollout: no more offers, reverts or waves until it is resumed"
	if !pause {
		use, short = "resume NAME", "Resume a paused rollout; after a tripped failure budget, the failures so far are excused"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dyn, err := dynamicClient(*kubeconfig)
			if err != nil {
				return err
			}
			return setRolloutPaused(cmd.Context(), dyn, args[0], pause, cmd.OutOrStdout())
		},
	}
}

// setRolloutPaused sets spec.paused of rollout name.
func setRolloutPaused(ctx context.Context, dyn dynamic.Interface, name string, paused bool, out io.Writer) error {
	patch := fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)
	if _, err := dyn.Resource(rolloutsGVR).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("rollout %s: %w", name, err)
	}
	what := "paused"
	if !paused {
		what = "resumed"
	}
	fmt.Fprintf(out, "rollout %s %s\n", name, what)
	return nil
}
