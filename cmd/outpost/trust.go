package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/outpost-mesh/outpost/firmware/manifest"
	"github.com/outpost-mesh/outpost/firmware/trust"
)

// newReleaseTrustCmd returns `outpost release trust`, which edits the
// hub's set of trusted release keys.
func newReleaseTrustCmd(kubeconfig *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trust",
		Short: "Add, list and remove the release keys the hub and its nodes trust",
		Long: `Edit the hub's trust set: the public keys releases must be signed with
and how many of them must sign (the threshold, 1 to the number of keys). It is
the ConfigMap ` + trust.Namespace + `/` + trust.Name + `; nodes learn it from the hub and keep it.
The hub marks Releases Verified by it; nodes verify every release themselves.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var threshold int
	add := &cobra.Command{
		Use:     "add KEY.pub [--threshold N]",
		Short:   "Trust a public key made by `outpost release keygen`",
		Example: "  outpost release trust add ops.pub\n  outpost release trust add security.pub --threshold 2",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pub, err := readPublicKey(args[0])
			if err != nil {
				return fmt.Errorf("read %s: %w", args[0], err)
			}
			th := 0
			if cmd.Flags().Changed("threshold") {
				th = threshold
			}
			return editTrust(cmd.Context(), cmd.OutOrStdout(), *kubeconfig, func(t *manifest.Trust) error {
				if !slices.ContainsFunc(t.Keys, func(k ed25519.PublicKey) bool { return k.Equal(pub) }) {
					t.Keys = append(t.Keys, pub)
				}
				return setThreshold(t, th)
			})
		},
	}
	add.Flags().IntVar(&threshold, "threshold", 0, "how many trusted keys must sign a release (default: unchanged, 1 for the first key)")
	var removeThreshold int
	remove := &cobra.Command{
		Use:     "remove KEYID [--threshold N]",
		Short:   "Stop trusting a key, by its id",
		Example: "  outpost release trust remove 3f2a9c0d1e4b5a6f\n  outpost release trust remove 3f2a9c0d1e4b5a6f --threshold 1",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			th := 0
			if cmd.Flags().Changed("threshold") {
				th = removeThreshold
			}
			return editTrust(cmd.Context(), cmd.OutOrStdout(), *kubeconfig, func(t *manifest.Trust) error {
				n := len(t.Keys)
				t.Keys = slices.DeleteFunc(t.Keys, func(k ed25519.PublicKey) bool { return manifest.KeyID(k) == args[0] })
				if len(t.Keys) == n {
					return fmt.Errorf("the hub does not trust a key of id %s (see `outpost release trust list`)", args[0])
				}
				return setThreshold(t, th)
			})
		},
	}
	remove.Flags().IntVar(&removeThreshold, "threshold", 0, "the threshold after the removal (default: unchanged)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the trusted key ids and the threshold",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, _, err := adminClient(*kubeconfig)
			if err != nil {
				return err
			}
			t, _, err := getTrust(cmd.Context(), cs)
			if err != nil {
				return err
			}
			printTrust(cmd.OutOrStdout(), t)
			return nil
		},
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}

// setThreshold sets t's threshold to th, or when th is 0 keeps it (1 for
// a first key, 0 once no key is left), refusing one outside
// 1..len(t.Keys).
func setThreshold(t *manifest.Trust, th int) error {
	n := len(trust.KeyIDs(*t))
	switch {
	case th != 0:
	case n == 0:
		th = 0
	case t.Threshold == 0:
		th = 1
	default:
		th = t.Threshold
	}
	if n > 0 && (th < 1 || th > n) || n == 0 && th != 0 {
		return fmt.Errorf("threshold %d with %d trusted keys: it must be 1 to the number of keys (say --threshold N)", th, n)
	}
	t.Threshold = th
	return nil
}

// getTrust reads the trust ConfigMap; nil when there is none.
func getTrust(ctx context.Context, cs kubernetes.Interface) (manifest.Trust, *corev1.ConfigMap, error) {
	cm, err := cs.CoreV1().ConfigMaps(trust.Namespace).Get(ctx, trust.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return manifest.Trust{}, nil, nil
	case err != nil:
		return manifest.Trust{}, nil, fmt.Errorf("read the trust set: %w", err)
	}
	t, err := trust.ParseTrust(cm.Data)
	if err != nil {
		return manifest.Trust{}, nil, fmt.Errorf("configmap %s/%s: %w", trust.Namespace, trust.Name, err)
	}
	return t, cm, nil
}

// editTrust applies edit to the hub's trust set and writes it back,
// trying again on a conflicting write, then prints it.
func editTrust(ctx context.Context, w io.Writer, kubeconfig string, edit func(*manifest.Trust) error) error {
	cs, _, err := adminClient(kubeconfig)
	if err != nil {
		return err
	}
	var result manifest.Trust
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		t, cm, err := getTrust(ctx, cs)
		if err != nil {
			return err
		}
		if err := edit(&t); err != nil {
			return err
		}
		data, err := trust.Data(t)
		if err != nil {
			return err
		}
		if cm == nil {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: trust.Namespace, Name: trust.Name}, Data: data}
			_, err = cs.CoreV1().ConfigMaps(trust.Namespace).Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), trust.Name, err)
			}
		} else {
			cm.Data = data
			_, err = cs.CoreV1().ConfigMaps(trust.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
		}
		result = t
		return err
	})
	if err != nil {
		var ae apierrors.APIStatus
		if errors.As(err, &ae) {
			return fmt.Errorf("write the trust set: %w", err)
		}
		return err
	}
	printTrust(w, result)
	return nil
}

func printTrust(w io.Writer, t manifest.Trust) {
	ids := trust.KeyIDs(t)
	if len(ids) == 0 {
		fmt.Fprintln(w, "the hub trusts no release key: add one with `outpost release trust add KEY.pub`")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY ID")
	for _, id := range ids {
		fmt.Fprintln(tw, id)
	}
	tw.Flush()
	fmt.Fprintf(w, "threshold: %d of %d\n", t.Threshold, len(ids))
}
