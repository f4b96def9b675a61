// Package volumes sets up the volumes of the edge agent's pods on the node,
// as kubelet's volume manager and plugins do: emptyDir, hostPath,
// configMap, secret, downwardAPI and projected (with the automounted
// service account volume upstream's admission adds), laid out as kubelet
// lays them out, kept up to date in place, torn down when the pod goes.
// The agent calls it and hands the Mounts it returns to the runtime; it
// imports nothing of the agent.
package volumes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Errors returned by the Manager, wrapped; test them with errors.Is.
var (
	// ErrMissingSource is wrapped by a MissingError: a configMap, secret
	// or key a volume needs and does not mark optional is not there, or
	// a service account token the pod reads is not held. It clears when
	// the object arrives; the agent words it as kubelet's FailedMount.
	ErrMissingSource = errors.New("missing volume source")

	// ErrUnsupported is returned by Setup for a volume of a type this
	// node does not provide (persistentVolumeClaim, nfs, csi, ephemeral,
	// a hugepages emptyDir...). The error names the type; retrying the
	// same spec fails the same way.
	ErrUnsupported = errors.New("unsupported volume type")

	// ErrInvalidSpec is returned by Setup and Mounts for a spec that
	// cannot be carried out as it is: a name unfit for a path, a
	// volumeMount of no volume, a subPath that leaves its volume, a
	// hostPath whose type check fails.
	ErrInvalidSpec = errors.New("invalid volume spec")
)

// MissingError says which object or key a volume lacks. It matches
// ErrMissingSource with errors.Is.
type MissingError struct {
	Kind      string // "ConfigMap", "Secret" or "ServiceAccountToken"
	Namespace string
	Name      string // the object's name; for a token, the volume's
	Key       string // the key (a token's path); "" when the object is missing
}

func (e *MissingError) Error() string {
	switch {
	case e.Kind == kindToken:
		return fmt.Sprintf("service account token %q of volume %q is not available", e.Key, e.Name)
	case e.Key != "":
		return fmt.Sprintf("couldn't find key %s in %s %s/%s", e.Key, e.Kind, e.Namespace, e.Name)
	}
	return fmt.Sprintf("%s %s/%s not found", strings.ToLower(e.Kind), e.Namespace, e.Name)
}

// Is reports whether target is ErrMissingSource.
func (e *MissingError) Is(target error) bool { return target == ErrMissingSource }

const (
	kindConfigMap = "ConfigMap"
	kindSecret    = "Secret"
	kindToken     = "ServiceAccountToken"
)

// Source gives the objects the pods' volumes project. Its methods must be
// safe for concurrent use; the Manager does not modify what they return.
type Source interface {
	// ConfigMap returns the named configMap, and whether there is one.
	ConfigMap(namespace, name string) (*corev1.ConfigMap, bool, error)
	// Secret returns the named secret, and whether there is one.
	Secret(namespace, name string) (*corev1.Secret, bool, error)
}

// Tokens gives the service account tokens of pods. It must be safe for
// concurrent use.
type Tokens interface {
	// Token returns the token pod reads in volume at path, its expiry,
	// and whether there is one. volume is AutomountTokenVolume for the
	// automounted service account volume (whose path is "token").
	Token(pod *corev1.Pod, volume, path string) (token string, expiry time.Time, ok bool)
}

// TokenFunc adapts a function to Tokens.
type TokenFunc func(pod *corev1.Pod, volume, path string) (string, time.Time, bool)

// Token calls f.
func (f TokenFunc) Token(pod *corev1.Pod, volume, path string) (string, time.Time, bool) {
	return f(pod, volume, path)
}

// AutomountTokenVolume is the volume Tokens is asked for the token of the
// automounted service account volume: sync/wire's AutomountVolume.
const AutomountTokenVolume = ""

// Config configures a Manager.
type Config struct {
	// Dir holds the pods' volumes: Dir/<pod UID>/volumes/<plugin>/<name>,
	// as kubelet's pods directory (plugin as kubelet names it on disk,
	// such as kubernetes.io~configmap). Required, absolute; the agent
	// puts it under its data directory. Nothing else may live there:
	// Sweep removes what it does not keep.
	Dir string
	// Source gives configMaps and secrets. Required.
	Source Source
	// Tokens gives service account tokens. Required.
	Tokens Tokens
	// Logger, or nil to log nothing.
	Logger *slog.Logger
	// Now, or nil for the wall clock: names the atomic writer's
	// timestamped directories and judges token expiry.
	Now func() time.Time
}

// DefaultConfig returns a Config without its required fields: no logger
// (nothing logged) and the wall clock.
func DefaultConfig() Config {
	return Config{}
}

// Validate reports what is wrong with c.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("volumes directory is required")
	case !filepath.IsAbs(c.Dir):
		return fmt.Errorf("volumes directory %q must be absolute", c.Dir)
	case filepath.Clean(c.Dir) == "/":
		return errors.New("volumes directory must not be /")
	case c.Source == nil:
		return errors.New("volume source is required")
	case c.Tokens == nil:
		return errors.New("token source is required")
	}
	return nil
}

// Manager sets up and tears down the volumes of pods. Its methods are
// safe for concurrent use; calls for one pod are serialized, calls for
// different pods run in parallel.
type Manager struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	locks map[string]*podLock

	// noswap is 0 while untried, 1 when tmpfs takes the noswap option, 2
	// when it does not (kernels before 6.4).
	noswap atomic.Int32
}

type podLock struct {
	mu   sync.Mutex
	refs int
}

// New returns a Manager for cfg. It starts nothing and touches no disk.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Dir = filepath.Clean(cfg.Dir)
	m := &Manager{cfg: cfg, log: cfg.Logger, now: cfg.Now, locks: map[string]*podLock{}}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m, nil
}

// lock serializes the calls for one pod; the returned function unlocks.
func (m *Manager) lock(uid string) func() {
	m.mu.Lock()
	l := m.locks[uid]
	if l == nil {
		l = &podLock{}
		m.locks[uid] = l
	}
	l.refs++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.locks, uid)
		}
		m.mu.Unlock()
	}
}

// Kubelet's plugin names, escaped for disk as kubelet escapes them.
const (
	pluginEmptyDir    = "kubernetes.io~empty-dir"
	pluginConfigMap   = "kubernetes.io~configmap"
	pluginSecret      = "kubernetes.io~secret"
	pluginDownwardAPI = "kubernetes.io~downward-api"
	pluginProjected   = "kubernetes.io~projected"
)

// Directories of a pod's directory, as kubelet's.
const (
	volumesDir  = "volumes"
	subpathsDir = "volume-subpaths"
)

func (m *Manager) podDir(uid string) string { return filepath.Join(m.cfg.Dir, uid) }

func (m *Manager) volumeDir(uid, plugin, name string) string {
	return filepath.Join(m.cfg.Dir, uid, volumesDir, plugin, name)
}

// uidRE is what a pod UID may be to name a directory: kubelet's UIDs are
// UUIDs; static pods' are hex hashes.
var uidRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func validUID(uid string) error {
	if !uidRE.MatchString(uid) {
		return fmt.Errorf("%w: pod UID %q cannot name a directory", ErrInvalidSpec, uid)
	}
	return nil
}

// validName reports whether name (a volume's or container's) is a DNS
// label, as the API validates them, and so safe as a path element.
func validName(what, name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("%w: %s name %q: %s", ErrInvalidSpec, what, name, strings.Join(errs, "; "))
	}
	return nil
}

// SetupOptions is what Setup needs beyond the pod.
type SetupOptions struct {
	// NodeAllocatable is the node's allocatable resources: a container's
	// limit where it sets none (downward API), and the bound of a
	// memory-backed volume's size.
	NodeAllocatable corev1.ResourceList
	// ServiceAccountAutomount is the automountServiceAccountToken of the
	// pod's service account, nil when it leaves it unset; it decides
	// whether a pod that leaves its own unset gets the automounted
	// service account volume (see Automounts).
	ServiceAccountAutomount *bool
}

// PodVolumes is the set-up volumes of one pod, from which its containers'
// mounts are made. It is immutable; a later Setup returns another.
type PodVolumes struct {
	m         *Manager
	uid       string
	vols      map[string]podVolume
	automount string // the automounted volume's name, "" for none
}

// podVolume is one set-up volume.
type podVolume struct {
	path     string // what a mount binds: the volume's directory, or a hostPath's path
	readOnly bool   // mounted read-only whatever the volumeMount says
}

// Setup sets up the volumes of pod: it makes what is missing and brings
// the content of configMap, secret, downwardAPI and projected volumes up
// to date with the Source and Tokens, through the atomic writer, so that
// running containers see the new files; content that has not changed is
// not written. It is idempotent: the agent calls it before starting the
// pod's containers and again whenever an object the pod projects, or a
// token, changes (or periodically).
//
// Every volume is set up that can be; the error joins one per volume that
// could not, each naming the volume and wrapping ErrMissingSource,
// ErrUnsupported, ErrInvalidSpec or the I/O error. The PodVolumes is nil
// on error. Setup never panics on a spec, however odd.
func (m *Manager) Setup(ctx context.Context, pod *corev1.Pod, opts SetupOptions) (*PodVolumes, error) {
	if pod == nil {
		return nil, fmt.Errorf("%w: no pod", ErrInvalidSpec)
	}
	uid := string(pod.UID)
	if err := validUID(uid); err != nil {
		return nil, err
	}
	vols, err := podSpecVolumes(pod, opts.ServiceAccountAutomount)
	if err != nil {
		return nil, err
	}
	unlock := m.lock(uid)
	defer unlock()
	if err := os.MkdirAll(filepath.Join(m.podDir(uid), volumesDir), 0o750); err != nil {
		return nil, fmt.Errorf("create pod volumes directory: %w", err)
	}
	in := &podInfo{
		pod:             pod,
		nodeAllocatable: opts.NodeAllocatable,
		fsGroup:         fsGroupOf(pod),
		fsUser:          fsUserOf(pod),
		now:             m.now(),
	}
	pv := &PodVolumes{m: m, uid: uid, vols: make(map[string]podVolume, len(vols))}
	var errs []error
	for _, v := range vols {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		got, err := m.setupVolume(in, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %q: %w", v.Name, err))
			continue
		}
		pv.vols[v.Name] = got
		if v.tokenVolume != nil {
			pv.automount = v.Name
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return pv, nil
}

// specVolume is a volume to set up: one of the pod's, or the automounted
// one, whose tokens Tokens gives under tokenVolume.
type specVolume struct {
	*corev1.Volume
	tokenVolume *string // nil: the volume's own name
}

// podSpecVolumes returns the volumes of pod to set up, the automounted
// service account volume last, after checking their names.
func podSpecVolumes(pod *corev1.Pod, saAutomount *bool) ([]specVolume, error) {
	seen := make(map[string]bool, len(pod.Spec.Volumes))
	out := make([]specVolume, 0, len(pod.Spec.Volumes)+1)
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if err := validName("volume", v.Name); err != nil {
			return nil, err
		}
		if seen[v.Name] {
			return nil, fmt.Errorf("%w: two volumes named %q", ErrInvalidSpec, v.Name)
		}
		seen[v.Name] = true
		out = append(out, specVolume{Volume: v})
	}
	if Automounts(pod, saAutomount) {
		tv := AutomountTokenVolume
		out = append(out, specVolume{Volume: automountVolume(), tokenVolume: &tv})
	}
	return out, nil
}

// sourceType returns the JSON name of the one source v sets, "" for none
// (an emptyDir, as the API defaults it); more than one is an error.
func sourceType(v *corev1.VolumeSource) (string, error) {
	rv := reflect.ValueOf(v).Elem()
	rt := rv.Type()
	name := ""
	for i := range rt.NumField() {
		f := rv.Field(i)
		if f.Kind() != reflect.Pointer || f.IsNil() {
			continue
		}
		n, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "" {
			return "", fmt.Errorf("%w: more than one volume source (%s, %s)", ErrInvalidSpec, name, n)
		}
		name = n
	}
	return name, nil
}

// setupVolume sets up one volume and returns what mounts bind.
func (m *Manager) setupVolume(in *podInfo, v specVolume) (podVolume, error) {
	typ, err := sourceType(&v.VolumeSource)
	if err != nil {
		return podVolume{}, err
	}
	uid := string(in.pod.UID)
	switch typ {
	case "", "emptyDir":
		dir := m.volumeDir(uid, pluginEmptyDir, v.Name)
		return podVolume{path: dir}, m.setupEmptyDir(in, dir, v.EmptyDir)
	case "hostPath":
		p, err := checkHostPath(v.HostPath)
		return podVolume{path: p}, err
	case "configMap":
		dir := m.volumeDir(uid, pluginConfigMap, v.Name)
		return podVolume{path: dir, readOnly: true}, m.setupProjection(in, dir, false, func(p payload) error {
			return m.configMapPayload(p, in.pod.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode, isTrue(v.ConfigMap.Optional))
		})
	case "secret":
		dir := m.volumeDir(uid, pluginSecret, v.Name)
		return podVolume{path: dir, readOnly: true}, m.setupProjection(in, dir, true, func(p payload) error {
			return m.secretPayload(p, in.pod.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode, isTrue(v.Secret.Optional))
		})
	case "downwardAPI":
		dir := m.volumeDir(uid, pluginDownwardAPI, v.Name)
		return podVolume{path: dir, readOnly: true}, m.setupProjection(in, dir, true, func(p payload) error {
			return downwardPayload(p, v.DownwardAPI.Items, in, v.DownwardAPI.DefaultMode)
		})
	case "projected":
		dir := m.volumeDir(uid, pluginProjected, v.Name)
		tokenVolume := v.Name
		if v.tokenVolume != nil {
			tokenVolume = *v.tokenVolume
		}
		return podVolume{path: dir, readOnly: true}, m.setupProjection(in, dir, true, func(p payload) error {
			return m.projectedPayload(p, in, v.Projected, tokenVolume)
		})
	}
	return podVolume{}, fmt.Errorf("%w: %s", ErrUnsupported, typ)
}

// setupProjection makes dir (on a tmpfs of its own if memory) and writes
// the payload fill makes into it.
func (m *Manager) setupProjection(in *podInfo, dir string, memory bool, fill func(payload) error) error {
	p := payload{}
	if err := fill(p); err != nil {
		return err
	}
	if _, err := ensureDir(dir, 0o777); err != nil {
		return err
	}
	if memory {
		if _, err := m.ensureTmpfs(dir, tmpfsSize(in.pod, in.nodeAllocatable, nil)); err != nil {
			return err
		}
	}
	if err := setRootOwnership(dir, in.fsGroup); err != nil {
		return err
	}
	_, err := writeAtomic(dir, p, in.fsGroup, in.now)
	return err
}

func (m *Manager) configMapPayload(p payload, namespace, name string, items []corev1.KeyToPath, def *int32, optional bool) error {
	cm, ok, err := m.cfg.Source.ConfigMap(namespace, name)
	if err != nil {
		return fmt.Errorf("get configmap %s/%s: %w", namespace, name, err)
	}
	if !ok || cm == nil {
		if optional {
			return nil
		}
		return &MissingError{Kind: kindConfigMap, Namespace: namespace, Name: name}
	}
	return keysPayload(p, kindConfigMap, namespace, name, configMapData(cm), items, def, optional)
}

func (m *Manager) secretPayload(p payload, namespace, name string, items []corev1.KeyToPath, def *int32, optional bool) error {
	s, ok, err := m.cfg.Source.Secret(namespace, name)
	if err != nil {
		return fmt.Errorf("get secret %s/%s: %w", namespace, name, err)
	}
	if !ok || s == nil {
		if optional {
			return nil
		}
		return &MissingError{Kind: kindSecret, Namespace: namespace, Name: name}
	}
	data := s.Data
	if len(s.StringData) > 0 { // not stored by the API, but honoured if a source holds it
		data = make(map[string][]byte, len(s.Data)+len(s.StringData))
		for k, v := range s.Data {
			data[k] = v
		}
		for k, v := range s.StringData {
			data[k] = []byte(v)
		}
	}
	return keysPayload(p, kindSecret, namespace, name, data, items, def, optional)
}

// projectedPayload fills p from the sources of a projected volume, later
// sources overriding earlier ones at the same path, as kubelet's.
func (m *Manager) projectedPayload(p payload, in *podInfo, src *corev1.ProjectedVolumeSource, tokenVolume string) error {
	def := src.DefaultMode
	ns := in.pod.Namespace
	var errs []error
	for _, s := range src.Sources {
		var err error
		switch {
		case s.ConfigMap != nil:
			err = m.configMapPayload(p, ns, s.ConfigMap.Name, s.ConfigMap.Items, def, isTrue(s.ConfigMap.Optional))
		case s.Secret != nil:
			err = m.secretPayload(p, ns, s.Secret.Name, s.Secret.Items, def, isTrue(s.Secret.Optional))
		case s.DownwardAPI != nil:
			err = downwardPayload(p, s.DownwardAPI.Items, in, def)
		case s.ServiceAccountToken != nil:
			err = m.tokenPayload(p, in, s.ServiceAccountToken, tokenVolume, def)
		case s.ClusterTrustBundle != nil:
			err = fmt.Errorf("%w: projected clusterTrustBundle", ErrUnsupported)
		case s.PodCertificate != nil:
			err = fmt.Errorf("%w: projected podCertificate", ErrUnsupported)
		default:
			err = fmt.Errorf("%w: projected source of no known type", ErrUnsupported)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tokenPayload puts a service account token at its path, with kubelet's
// mode: the volume's, or 0600 (owned by the pod's one user, if it has
// one) when the pod sets fsGroup or runs as one user.
func (m *Manager) tokenPayload(p payload, in *podInfo, src *corev1.ServiceAccountTokenProjection, volume string, def *int32) error {
	tok, exp, ok := m.cfg.Tokens.Token(in.pod, volume, src.Path)
	if !ok || tok == "" || (!exp.IsZero() && !in.now.Before(exp)) {
		name := volume
		if name == AutomountTokenVolume {
			name = AutomountVolumeName
		}
		return &MissingError{Kind: kindToken, Namespace: in.pod.Namespace, Name: name, Key: src.Path}
	}
	f := file{data: []byte(tok), mode: modeOf(nil, def)}
	if in.fsUser != nil || in.fsGroup != nil {
		f.mode = tokenModeOwned
		f.uid = in.fsUser
	}
	p[src.Path] = f
	return nil
}

// fsGroupOf returns the pod's fsGroup, nil for none.
func fsGroupOf(pod *corev1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil && *sc.FSGroup >= 0 {
		return sc.FSGroup
	}
	return nil
}

// fsUserOf returns the user all of pod's init and regular containers run
// as, nil unless every one sets it (or inherits the pod's) and they
// agree, as kubelet's FsUserFrom.
func fsUserOf(pod *corev1.Pod) *int64 {
	var user *int64
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			var u *int64
			if sc := cs[i].SecurityContext; sc != nil && sc.RunAsUser != nil {
				u = sc.RunAsUser
			} else if psc := pod.Spec.SecurityContext; psc != nil {
				u = psc.RunAsUser
			}
			if u == nil || *u < 0 || (user != nil && *user != *u) {
				return nil
			}
			user = u
		}
	}
	return user
}
