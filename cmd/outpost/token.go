package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outpost-mesh/outpost/hub/auth"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// defaultKubeconfig is the admin kubeconfig of a hub whose data directory
// is ./.outpost/hub, used when neither --kubeconfig nor $KUBECONFIG says
// otherwise.
var defaultKubeconfig = filepath.Join(".outpost", "hub", "admin.kubeconfig")

// defaultSyncPort is the port of the hub's sync endpoint, which joining
// nodes dial.
const defaultSyncPort = "7443"

// newTokenCmd returns `outpost token`, which manages the bootstrap tokens
// edge nodes join with.
func newTokenCmd() *cobra.Command {
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Create, list and delete the bootstrap tokens edge nodes join with",
		Long: `Manage bootstrap tokens. A node joins the hub with a token, which
authenticates it once, and the CA hash, which lets it trust the hub before it
has the CA; it then gets its own certificate. Tokens are Secrets of type
bootstrap.kubernetes.io/token in kube-system, as in upstream Kubernetes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "",
		"admin kubeconfig of the hub (default $KUBECONFIG, else "+defaultKubeconfig+")")
	cmd.AddCommand(newTokenCreateCmd(&kubeconfig), newTokenListCmd(&kubeconfig), newTokenDeleteCmd(&kubeconfig))
	return cmd
}

func newTokenCreateCmd(kubeconfig *string) *cobra.Command {
	var (
		site, description, syncAddr string
		ttl                         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a bootstrap token and print it with the command that joins a node",
		Example: `  outpost token create
  outpost token create --site berlin-3 --ttl 2h --description "gateway rollout, line 3"
  outpost token create --sync-addr hub.example.com:7443`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ttl < 0 {
				return fmt.Errorf("invalid --ttl %v: use a positive duration, or 0 for a token that never expires", ttl)
			}
			if site != "" {
				if errs := validation.IsValidLabelValue(site); len(errs) > 0 {
					return fmt.Errorf("invalid --site %q: %s", site, strings.Join(errs, "; "))
				}
			}
			cs, cfg, err := adminClient(*kubeconfig)
			if err != nil {
				return err
			}
			hash, err := caHash(cfg)
			if err != nil {
				return err
			}
			if syncAddr == "" {
				if syncAddr, err = defaultSyncAddr(cfg.Host); err != nil {
					return err
				}
			}
			token, secret, err := createToken(cmd.Context(), cs, site, description, ttl, time.Now())
			if err != nil {
				return err
			}
			return printToken(cmd.OutOrStdout(), token, secret, hash, syncAddr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&site, "site", "", "site the nodes joining with this token belong to")
	f.DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token can be used; 0 for ever")
	f.StringVar(&description, "description", "", "what the token is for, shown by `outpost token list`")
	f.StringVar(&syncAddr, "sync-addr", "", "host:port nodes dial to join, for the join command printed (default: the kubeconfig's server host, port "+defaultSyncPort+")")
	return cmd
}

// createToken creates a new token's Secret and returns the token and its
// Secret as created.
func createToken(ctx context.Context, cs kubernetes.Interface, site, description string, ttl time.Duration, now time.Time) (string, *corev1.Secret, error) {
	// A new id collides with an existing one once in two billion; try
	// again rather than fail.
	for attempt := 0; ; attempt++ {
		id, secret := auth.GenerateToken()
		s := auth.NewBootstrapTokenSecret(id, secret, site, ttl, now)
		if description != "" {
			s.Data[auth.BootstrapTokenDescriptionKey] = []byte(description)
		}
		created, err := cs.CoreV1().Secrets(auth.BootstrapTokenNamespace).Create(ctx, s, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) && attempt < 3 {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("create bootstrap token: %w", err)
		}
		return id + "." + secret, created, nil
	}
}

func printToken(w io.Writer, token string, s *corev1.Secret, hash, syncAddr string) error {
	expires := "never"
	if exp, ok := auth.BootstrapTokenExpiration(s); ok {
		expires = exp.UTC().Format(time.RFC3339)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "token: %s\n", token)
	fmt.Fprintf(&b, "ca-cert-hash: %s\n", hash)
	fmt.Fprintf(&b, "expires: %s\n", expires)
	if site := s.Labels[auth.SiteLabel]; site != "" {
		fmt.Fprintf(&b, "site: %s\n", site)
	}
	fmt.Fprintf(&b, "\nJoin an edge node with:\n  outpost edge --hub %s --token %s --ca-cert-hash %s\n", syncAddr, token, hash)
	_, err := io.WriteString(w, b.String())
	return err
}

func newTokenListCmd(kubeconfig *string) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the bootstrap tokens (their ids: secrets are shown only at creation)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, _, err := adminClient(*kubeconfig)
			if err != nil {
				return err
			}
			list, err := cs.CoreV1().Secrets(auth.BootstrapTokenNamespace).List(cmd.Context(), metav1.ListOptions{
				FieldSelector: "type=" + string(corev1.SecretTypeBootstrapToken),
			})
			if err != nil {
				return fmt.Errorf("list bootstrap tokens: %w", err)
			}
			return printTokens(cmd.OutOrStdout(), list.Items, time.Now())
		},
	}
}

func printTokens(w io.Writer, secrets []corev1.Secret, now time.Time) error {
	slices.SortFunc(secrets, func(a, b corev1.Secret) int { return strings.Compare(a.Name, b.Name) })
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "ID\tEXPIRES\tSITE\tDESCRIPTION")
	for i := range secrets {
		s := &secrets[i]
		id, ok := strings.CutPrefix(s.Name, auth.BootstrapTokenPrefix)
		if !ok || s.Type != corev1.SecretTypeBootstrapToken || !auth.ValidTokenID(id) {
			continue
		}
		expires := "never"
		if _, ok := s.Data[auth.BootstrapTokenExpirationKey]; ok {
			switch exp, ok := auth.BootstrapTokenExpiration(s); {
			case !ok:
				expires = "invalid"
			case !now.Before(exp):
				expires = "expired"
			default:
				expires = exp.UTC().Format(time.RFC3339)
			}
		}
		site := s.Labels[auth.SiteLabel]
		if site == "" {
			site = "<none>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, expires, site, s.Data[auth.BootstrapTokenDescriptionKey])
	}
	return tw.Flush()
}

func newTokenDeleteCmd(kubeconfig *string) *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID|TOKEN...",
		Short: "Delete bootstrap tokens: nodes can no longer join with them",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := make([]string, 0, len(args))
			for _, arg := range args {
				id, _, _ := strings.Cut(arg, ".")
				if !auth.ValidTokenID(id) {
					return fmt.Errorf("%q is not a token id: want 6 characters [a-z0-9], or the whole token", id)
				}
				ids = append(ids, id)
			}
			cs, _, err := adminClient(*kubeconfig)
			if err != nil {
				return err
			}
			for _, id := range ids {
				err := cs.CoreV1().Secrets(auth.BootstrapTokenNamespace).Delete(cmd.Context(), auth.BootstrapTokenSecretName(id), metav1.DeleteOptions{})
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("bootstrap token %s not found", id)
				}
				if err != nil {
					return fmt.Errorf("delete bootstrap token %s: %w", id, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bootstrap token %s deleted\n", id)
			}
			return nil
		},
	}
}

// adminClient returns a client of the hub from the kubeconfig at path, or
// when path is "" from $KUBECONFIG (a list of files, as kubectl reads it),
// or else from defaultKubeconfig. It does not fall back to ~/.kube/config,
// which may well be another cluster's.
func adminClient(path string) (kubernetes.Interface, *rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{}
	switch env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); {
	case path != "":
		rules.ExplicitPath = path
	case env != "":
		rules.Precedence = filepath.SplitList(env)
	default:
		rules.ExplicitPath = defaultKubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("load kubeconfig: %w (point --kubeconfig at the admin kubeconfig `outpost hub` wrote in its data directory)", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("hub client: %w", err)
	}
	return cs, cfg, nil
}

// caHash returns the CA hash of the first CA certificate the client config
// trusts: the hub's.
func caHash(cfg *rest.Config) (string, error) {
	data := cfg.CAData
	if len(data) == 0 && cfg.CAFile != "" {
		var err error
		if data, err = os.ReadFile(cfg.CAFile); err != nil {
			return "", fmt.Errorf("read the hub CA: %w", err)
		}
	}
	pin, err := wire.CAHashPEM(data)
	if errors.Is(err, wire.ErrNoCA) {
		return "", errors.New("the kubeconfig has no certificate-authority-data with a CA certificate: use the admin kubeconfig `outpost hub` wrote, which carries the hub CA")
	}
	return pin, err
}

// defaultSyncAddr returns the host of the API server URL with the default
// sync port.
func defaultSyncAddr(server string) (string, error) {
	host := ""
	if u, err := url.Parse(server); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	} else if h, _, err := net.SplitHostPort(server); err == nil {
		host = h // host:port without a scheme
	}
	if host == "" {
		return "", fmt.Errorf("kubeconfig server %q has no host: set --sync-addr", server)
	}
	return net.JoinHostPort(host, defaultSyncPort), nil
}
