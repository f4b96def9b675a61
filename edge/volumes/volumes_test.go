package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/randfill"

	"github.com/outpost-mesh/outpost/edge/runtime"
)

type runtimeEnv struct{ name, value string }

func toEnv(in []runtimeEnv) []runtime.EnvVar {
	out := make([]runtime.EnvVar, len(in))
	for i, e := range in {
		out[i] = runtime.EnvVar{Name: e.name, Value: e.value}
	}
	return out
}

// objects is a Source and Tokens held in maps.
type objects struct {
	mu         sync.Mutex
	configMaps map[string]*corev1.ConfigMap // by namespace/name
	secrets    map[string]*corev1.Secret
	tokens     map[string]string // by volume/path
}

func newObjects() *objects {
	return &objects{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}, tokens: map[string]string{}}
}

func (o *objects) ConfigMap(ns, name string) (*corev1.ConfigMap, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cm, ok := o.configMaps[ns+"/"+name]
	return cm, ok, nil
}

func (o *objects) Secret(ns, name string) (*corev1.Secret, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, ok := o.secrets[ns+"/"+name]
	return s, ok, nil
}

func (o *objects) Token(_ *corev1.Pod, volume, path string) (string, time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.tokens[volume+"/"+path]
	return t, time.Now().Add(time.Hour), ok
}

func (o *objects) setConfigMap(ns, name string, data map[string]string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.configMaps[ns+"/"+name] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func (o *objects) setSecret(ns, name string, data map[string]string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	o.secrets[ns+"/"+name] = s
}

// newTestManager returns a Manager over a fresh directory, its objects,
// and the directory; everything it mounts is gone at the end of the test.
func newTestManager(t *testing.T) (*Manager, *objects, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts tmpfs and bind mounts")
	}
	dir := t.TempDir()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	objs := newObjects()
	cfg := DefaultConfig()
	cfg.Dir = filepath.Join(real, "pods")
	cfg.Source = objs
	cfg.Tokens = objs
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Sweep(context.Background(), func(string) bool { return false }); err != nil {
			t.Errorf("Sweep at cleanup: %v", err)
		}
		mounts, _ := readMountInfo()
		for _, p := range mountsUnder(mounts, real) {
			t.Errorf("mount left at %s", p)
			unix.Unmount(p, unix.MNT_DETACH)
		}
	})
	return m, objs, real
}

func testPod(uid string, vols ...corev1.Volume) *corev1.Pod {
	f := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: types.UID(uid), Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &f,
			Volumes:                      vols,
			Containers:                   []corev1.Container{{Name: "app"}},
		},
	}
}

func mustSetup(t *testing.T, m *Manager, pod *corev1.Pod) *PodVolumes {
	t.Helper()
	pv, err := m.Setup(context.Background(), pod, SetupOptions{NodeAllocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	return pv
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func statOf(t *testing.T, p string) (os.FileMode, uint32, uint32) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fi.Mode(), st.Uid, st.Gid
}

func mountType(t *testing.T, p string) string {
	t.Helper()
	mounts, err := readMountInfo()
	if err != nil {
		t.Fatal(err)
	}
	typ := ""
	for _, mi := range mounts {
		if mi.mountPoint == p {
			typ = mi.fsType
		}
	}
	return typ
}

func i32(v int32) *int32 { return &v }
func i64(v int64) *int64 { return &v }

func TestEmptyDir(t *testing.T) {
	m, _, _ := newTestManager(t)
	size := resource.MustParse("8Mi")
	pod := testPod("u-empty",
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "plain"},
		corev1.Volume{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}},
		corev1.Volume{Name: "mem-default", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
	)
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: i64(2345)}
	mustSetup(t, m, pod)
	scratch := m.volumeDir("u-empty", pluginEmptyDir, "scratch")
	mode, _, gid := statOf(t, scratch)
	if mode.Perm() != 0o777 || mode&os.ModeSetgid == 0 || gid != 2345 {
		t.Errorf("emptyDir mode %v gid %d, want drwxrwxrwx setgid, gid 2345", mode, gid)
	}
	if typ := mountType(t, scratch); typ != "" {
		t.Errorf("disk emptyDir is a %s mount", typ)
	}
	if _, err := os.Stat(m.volumeDir("u-empty", pluginEmptyDir, "plain")); err != nil {
		t.Errorf("volume with no source is not an emptyDir: %v", err)
	}
	mem := m.volumeDir("u-empty", pluginEmptyDir, "mem")
	if typ := mountType(t, mem); typ != "tmpfs" {
		t.Fatalf("Memory emptyDir mounted as %q, want tmpfs", typ)
	}
	if got := tmpfsBytes(t, mem); got != 8<<20 {
		t.Errorf("Memory emptyDir with sizeLimit 8Mi has %d bytes", got)
	}
	if got := tmpfsBytes(t, m.volumeDir("u-empty", pluginEmptyDir, "mem-default")); got != 256<<20 {
		t.Errorf("Memory emptyDir without sizeLimit has %d bytes, want the node's allocatable 256Mi", got)
	}
	// Idempotent: a second Setup mounts nothing more and keeps content.
	if err := os.WriteFile(filepath.Join(mem, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(scratch, 0o700); err != nil { // as a container may
		t.Fatal(err)
	}
	mustSetup(t, m, pod)
	if mode, _, _ := statOf(t, scratch); mode.Perm() != 0o700 {
		t.Errorf("second Setup reset the emptyDir's mode the container set: %v", mode)
	}
	if readFile(t, filepath.Join(mem, "f")) != "x" {
		t.Error("second Setup lost emptyDir content")
	}
	mounts, _ := readMountInfo()
	if n := len(mountsUnder(mounts, mem)); n != 1 {
		t.Errorf("%d mounts at the Memory emptyDir after two Setups, want 1", n)
	}
}

func tmpfsBytes(t *testing.T, p string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * int64(st.Bsize) //nolint:unconvert // int32 on arm
}

func TestConfigMapVolume(t *testing.T) {
	m, objs, _ := newTestManager(t)
	objs.setConfigMap("shop", "cfg", map[string]string{"a.conf": "A", "b.conf": "B", "c.conf": "C"})
	pod := testPod("u-cm",
		corev1.Volume{Name: "all", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, DefaultMode: i32(0o600)}}},
		corev1.Volume{Name: "some", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
			Items:                []corev1.KeyToPath{{Key: "a.conf", Path: "etc/a"}, {Key: "b.conf", Path: "b", Mode: i32(0o400)}}}}},
	)
	mustSetup(t, m, pod)
	all := m.volumeDir("u-cm", pluginConfigMap, "all")
	if typ := mountType(t, all); typ != "" {
		t.Errorf("configMap volume is a %s mount, want on disk", typ)
	}
	for k, v := range map[string]string{"a.conf": "A", "b.conf": "B", "c.conf": "C"} {
		if got := readFile(t, filepath.Join(all, k)); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
		if l, _ := os.Readlink(filepath.Join(all, k)); l != "..data/"+k {
			t.Errorf("%s links to %q, want ..data/%s", k, l, k)
		}
		if mode, _, _ := statOf(t, filepath.Join(all, k)); mode.Perm() != 0o600 {
			t.Errorf("%s mode %v, want defaultMode 0600", k, mode)
		}
	}
	data, _ := os.Readlink(filepath.Join(all, dataDirName))
	if !strings.HasPrefix(data, "..") || strings.Contains(data, "/") {
		t.Errorf("..data links to %q, want a timestamped directory", data)
	}
	some := m.volumeDir("u-cm", pluginConfigMap, "some")
	if got := readFile(t, filepath.Join(some, "etc/a")); got != "A" {
		t.Errorf("item etc/a = %q", got)
	}
	if mode, _, _ := statOf(t, filepath.Join(some, "etc/a")); mode.Perm() != 0o644 {
		t.Errorf("item without mode: %v, want the default 0644", mode)
	}
	if mode, _, _ := statOf(t, filepath.Join(some, "b")); mode.Perm() != 0o400 {
		t.Errorf("item with mode 0400: %v", mode)
	}
	if _, err := os.Lstat(filepath.Join(some, "c.conf")); err == nil {
		t.Error("key not among the items was projected")
	}
}

func TestSecretVolumeOnTmpfsWithFSGroup(t *testing.T) {
	m, objs, _ := newTestManager(t)
	objs.setSecret("shop", "creds", map[string]string{"user": "u", "pass": "p"})
	pod := testPod("u-sec", corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: "creds", Items: []corev1.KeyToPath{{Key: "user", Path: "user"}, {Key: "pass", Path: "pass", Mode: i32(0o600)}}}}})
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: i64(3000)}
	mustSetup(t, m, pod)
	dir := m.volumeDir("u-sec", pluginSecret, "creds")
	if typ := mountType(t, dir); typ != "tmpfs" {
		t.Fatalf("secret volume mounted as %q, want tmpfs", typ)
	}
	if got := tmpfsBytes(t, dir); got != 256<<20 {
		t.Errorf("secret tmpfs of %d bytes, want the node's allocatable memory", got)
	}
	for name, want := range map[string]os.FileMode{"user": 0o644, "pass": 0o640} {
		mode, _, gid := statOf(t, filepath.Join(dir, name))
		if mode.Perm() != want || gid != 3000 {
			t.Errorf("%s: mode %v gid %d, want %v gid 3000", name, mode, gid, want)
		}
	}
	if got := readFile(t, filepath.Join(dir, "pass")); got != "p" {
		t.Errorf("pass = %q", got)
	}
	data, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if mode, _, gid := statOf(t, filepath.Join(dir, data)); mode&os.ModeSetgid == 0 || gid != 3000 {
		t.Errorf("data directory mode %v gid %d, want setgid, gid 3000", mode, gid)
	}
}

func TestUpdateInPlace(t *testing.T) {
	m, objs, _ := newTestManager(t)
	objs.setConfigMap("shop", "cfg", map[string]string{"k": "v1", "gone": "soon"})
	pod := testPod("u-upd", corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}})
	mustSetup(t, m, pod)
	dir := m.volumeDir("u-upd", pluginConfigMap, "cfg")
	before, _ := os.Readlink(filepath.Join(dir, dataDirName))

	mustSetup(t, m, pod)
	if same, _ := os.Readlink(filepath.Join(dir, dataDirName)); same != before {
		t.Errorf("unchanged content rewritten: ..data %s -> %s", before, same)
	}

	held, err := os.Open(filepath.Join(dir, "k")) // a reader of the old version
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	objs.setConfigMap("shop", "cfg", map[string]string{"k": "v2", "new": "n"})
	mustSetup(t, m, pod)
	after, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if after == before {
		t.Fatal("..data not swapped after the configMap changed")
	}
	if _, err := os.Lstat(filepath.Join(dir, before)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old data directory %s still there: %v", before, err)
	}
	if got := readFile(t, filepath.Join(dir, "k")); got != "v2" {
		t.Errorf("k through its link = %q, want v2", got)
	}
	if got := readFile(t, filepath.Join(dir, "new")); got != "n" {
		t.Errorf("new key = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed key's link still there: %v", err)
	}
	b := make([]byte, 8)
	n, _ := held.Read(b)
	if string(b[:n]) != "v1" {
		t.Errorf("file opened before the update reads %q, want the old v1", b[:n])
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 4 { // ..<ts>, ..data, k, new
		t.Errorf("volume directory holds %v", names)
	}
}

func TestMissingSources(t *testing.T) {
	m, objs, _ := newTestManager(t)
	objs.setConfigMap("shop", "cfg", map[string]string{"k": "v"})
	tr := true
	cm := func(name string, optional *bool, items ...corev1.KeyToPath) corev1.Volume {
		return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Optional: optional, Items: items}}}
	}
	for _, tc := range []struct {
		name    string
		vol     corev1.Volume
		missing *MissingError
	}{
		{"missing configMap", cm("nope", nil), &MissingError{Kind: kindConfigMap, Namespace: "shop", Name: "nope"}},
		{"missing key", cm("cfg", nil, corev1.KeyToPath{Key: "x", Path: "x"}), &MissingError{Kind: kindConfigMap, Namespace: "shop", Name: "cfg", Key: "x"}},
		{"missing secret", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
			&MissingError{Kind: kindSecret, Namespace: "shop", Name: "s"}},
		{"optional configMap", cm("nope", &tr), nil},
		{"optional key", cm("cfg", &tr, corev1.KeyToPath{Key: "x", Path: "x"}), nil},
		{"missing token", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}}}}}},
			&MissingError{Kind: kindToken, Namespace: "shop", Name: "v", Key: "t"}},
	} {
		_, err := m.Setup(context.Background(), testPod("u-miss", tc.vol), SetupOptions{})
		if tc.missing == nil {
			if err != nil {
				t.Errorf("%s: Setup: %v", tc.name, err)
			}
			continue
		}
		var me *MissingError
		if !errors.Is(err, ErrMissingSource) || !errors.As(err, &me) || *me != *tc.missing {
			t.Errorf("%s: Setup = %v, want %v", tc.name, err, tc.missing)
		} else if !strings.Contains(err.Error(), `volume "v"`) {
			t.Errorf("%s: error %q does not name the volume", tc.name, err)
		}
	}
	// The optional configMap that is missing makes an empty volume.
	ents, _ := os.ReadDir(m.volumeDir("u-miss", pluginConfigMap, "v"))
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "..") {
			t.Errorf("empty optional volume holds %s", e.Name())
		}
	}
}

func TestHostPathTypes(t *testing.T) {
	m, _, dir := newTestManager(t)
	host := filepath.Join(dir, "host")
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(host, "file"), nil, 0o644)
	sock := filepath.Join(host, "sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	typ := func(s corev1.HostPathType) *corev1.HostPathType { return &s }
	for _, tc := range []struct {
		path string
		typ  *corev1.HostPathType
		ok   bool
	}{
		{filepath.Join(host, "anything"), nil, true},
		{filepath.Join(host, "new/dir"), typ(corev1.HostPathDirectoryOrCreate), true},
		{filepath.Join(host, "file"), typ(corev1.HostPathDirectoryOrCreate), false},
		{host, typ(corev1.HostPathDirectory), true},
		{filepath.Join(host, "none"), typ(corev1.HostPathDirectory), false},
		{filepath.Join(host, "file"), typ(corev1.HostPathDirectory), false},
		{filepath.Join(host, "newfile"), typ(corev1.HostPathFileOrCreate), true},
		{filepath.Join(host, "nodir/newfile"), typ(corev1.HostPathFileOrCreate), false},
		{filepath.Join(host, "file"), typ(corev1.HostPathFile), true},
		{host, typ(corev1.HostPathFile), false},
		{sock, typ(corev1.HostPathSocket), true},
		{filepath.Join(host, "file"), typ(corev1.HostPathSocket), false},
		{"/dev/null", typ(corev1.HostPathCharDev), true},
		{host, typ(corev1.HostPathCharDev), false},
		{"/dev/null", typ(corev1.HostPathBlockDev), false},
		{host, typ("Weird"), false},
		{"relative/path", nil, false},
		{host + "/../etc", nil, false},
	} {
		pod := testPod("u-host", corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: tc.path, Type: tc.typ}}})
		pv, err := m.Setup(context.Background(), pod, SetupOptions{})
		name := "<unset>"
		if tc.typ != nil {
			name = string(*tc.typ)
		}
		if (err == nil) != tc.ok {
			t.Errorf("hostPath %s type %s: Setup = %v, want ok %v", tc.path, name, err, tc.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("hostPath %s type %s: error %v is not ErrInvalidSpec", tc.path, name, err)
			}
			continue
		}
		ms, err := pv.Mounts(&corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "h", MountPath: "/h"}}}, nil)
		if err != nil || len(ms) != 1 || ms[0].HostPath != tc.path {
			t.Errorf("hostPath %s: Mounts = %v, %v", tc.path, ms, err)
		}
	}
	if mode, _, _ := statOf(t, filepath.Join(host, "new/dir")); mode.Perm() != 0o755 {
		t.Errorf("DirectoryOrCreate made mode %v, want 0755", mode)
	}
	if mode, _, _ := statOf(t, filepath.Join(host, "newfile")); mode.Perm() != 0o644 || !mode.IsRegular() {
		t.Errorf("FileOrCreate made mode %v, want 0644 file", mode)
	}
}

func TestMountsAndSubPath(t *testing.T) {
	m, objs, dir := newTestManager(t)
	objs.setConfigMap("shop", "cfg", map[string]string{"app.conf": "v1"})
	host := filepath.Join(dir, "host")
	os.MkdirAll(filepath.Join(host, "data"), 0o755)
	os.WriteFile(filepath.Join(host, "data", "keep"), []byte("precious"), 0o644)
	pod := testPod("u-sub",
		corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}},
	)
	pv := mustSetup(t, m, pod)
	scratch := m.volumeDir("u-sub", pluginEmptyDir, "scratch")
	os.Symlink("/etc", filepath.Join(scratch, "evil"))
	os.Symlink("../../../../..", filepath.Join(scratch, "up"))
	os.MkdirAll(filepath.Join(scratch, "real"), 0o755)
	os.Symlink("real", filepath.Join(scratch, "inside"))

	c := &corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{
		{Name: "cfg", MountPath: "/etc/app.conf", SubPath: "app.conf"},
		{Name: "scratch", MountPath: "data", ReadOnly: true},
		{Name: "scratch", MountPath: "/logs", SubPathExpr: "logs/$(POD_NAME)"},
		{Name: "host", MountPath: "/keep", SubPath: "data"},
		{Name: "scratch", MountPath: "/in", SubPath: "inside"},
	}}
	ms, err := pv.Mounts(c, toEnv([]runtimeEnv{{"POD_NAME", "web-0"}}))
	if err != nil {
		t.Fatalf("Mounts: %v", err)
	}
	if len(ms) != 5 {
		t.Fatalf("Mounts = %v", ms)
	}
	subs := filepath.Join(m.podDir("u-sub"), subpathsDir)
	want := []runtime.Mount{
		{HostPath: filepath.Join(subs, "cfg", "app", "0"), ContainerPath: "/etc/app.conf", ReadOnly: true},
		{HostPath: scratch, ContainerPath: "/data", ReadOnly: true},
		{HostPath: filepath.Join(subs, "scratch", "app", "2"), ContainerPath: "/logs"},
		{HostPath: filepath.Join(subs, "host", "app", "3"), ContainerPath: "/keep"},
		{HostPath: filepath.Join(subs, "scratch", "app", "4"), ContainerPath: "/in"},
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("mount %d = %+v, want %+v", i, ms[i], want[i])
		}
	}
	if got := readFile(t, ms[0].HostPath); got != "v1" {
		t.Errorf("subPath file of the configMap reads %q", got)
	}
	if mode, _, _ := statOf(t, filepath.Join(scratch, "logs/web-0")); !mode.IsDir() || mode.Perm() != 0o777 {
		t.Errorf("missing subPath made with mode %v, want the volume root's 0777", mode)
	}
	if got := readFile(t, filepath.Join(ms[3].HostPath, "keep")); got != "precious" {
		t.Errorf("hostPath subPath reads %q", got)
	}
	os.WriteFile(filepath.Join(scratch, "real", "x"), []byte("in"), 0o644)
	if got := readFile(t, filepath.Join(ms[4].HostPath, "x")); got != "in" {
		t.Errorf("subPath through a symlink inside the volume reads %q", got)
	}
	// Again (a restart): the binds are made afresh, not stacked.
	if _, err := pv.Mounts(c, toEnv([]runtimeEnv{{"POD_NAME", "web-0"}})); err != nil {
		t.Fatalf("Mounts again: %v", err)
	}
	mounts, _ := readMountInfo()
	if n := len(mountsUnder(mounts, subs)); n != 4 {
		t.Errorf("%d subPath binds after two Mounts, want 4", n)
	}

	for _, vm := range []corev1.VolumeMount{
		{Name: "scratch", MountPath: "/x", SubPath: "evil"},
		{Name: "scratch", MountPath: "/x", SubPath: "evil/passwd"},
		{Name: "scratch", MountPath: "/x", SubPath: "up"},
		{Name: "scratch", MountPath: "/x", SubPath: "../x"},
		{Name: "scratch", MountPath: "/x", SubPath: "a/../../x"},
		{Name: "scratch", MountPath: "/x", SubPath: "/etc"},
		{Name: "scratch", MountPath: "/x", SubPath: "evil/newdir"},
		{Name: "scratch", MountPath: "/x", SubPathExpr: "$(UNSET)"},
		{Name: "scratch", MountPath: "/x", SubPathExpr: "$(DOTS)"},
		{Name: "nope", MountPath: "/x"},
	} {
		c := &corev1.Container{Name: "bad", VolumeMounts: []corev1.VolumeMount{vm}}
		ms, err := pv.Mounts(c, toEnv([]runtimeEnv{{"DOTS", "../.."}}))
		if !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("Mounts(%+v) = %v, %v; want ErrInvalidSpec", vm, ms, err)
		}
	}
	if _, err := os.Lstat("/etc/newdir"); err == nil {
		t.Error("subPath through a symlink made /etc/newdir")
	}

	if err := m.Teardown(context.Background(), "u-sub"); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if got := readFile(t, filepath.Join(host, "data", "keep")); got != "precious" {
		t.Errorf("Teardown touched the hostPath: keep = %q", got)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("Teardown followed a symlink: %v", err)
	}
}

func TestServiceAccountAutomount(t *testing.T) {
	m, objs, _ := newTestManager(t)
	objs.setConfigMap("shop", RootCAConfigMap, map[string]string{"ca.crt": "CA", "other": "x"})
	objs.tokens[AutomountTokenVolume+"/token"] = "jwt-1"
	objs.tokens["own/tok"] = "jwt-own"
	pod := testPod("u-sa", corev1.Volume{Name: "own", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: i32(0o644),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "tok", Audience: "vault"}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "mem", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
			}}},
		},
	}}})
	pod.Spec.AutomountServiceAccountToken = nil
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "own-sa", VolumeMounts: []corev1.VolumeMount{{Name: "own", MountPath: AutomountPath}}})
	pv := mustSetup(t, m, pod)

	dir := m.volumeDir("u-sa", pluginProjected, AutomountVolumeName)
	if typ := mountType(t, dir); typ != "tmpfs" {
		t.Fatalf("automounted volume mounted as %q, want tmpfs", typ)
	}
	for name, want := range map[string]string{"token": "jwt-1", "ca.crt": "CA", "namespace": "shop"} {
		if got := readFile(t, filepath.Join(dir, name)); got != want {
			t.Errorf("automounted %s = %q, want %q", name, got, want)
		}
		if mode, _, _ := statOf(t, filepath.Join(dir, name)); mode.Perm() != 0o644 {
			t.Errorf("automounted %s mode %v, want 0644", name, mode)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "other")); err == nil {
		t.Error("automounted volume projects more of kube-root-ca.crt than ca.crt")
	}
	own := m.volumeDir("u-sa", pluginProjected, "own")
	if got := readFile(t, filepath.Join(own, "labels")); got != `app="web"` {
		t.Errorf("labels = %q", got)
	}
	if got := readFile(t, filepath.Join(own, "mem")); got != "256" {
		t.Errorf("memory limit defaulted to allocatable = %q, want 256 (Mi)", got)
	}
	if got := readFile(t, filepath.Join(own, "tok")); got != "jwt-own" {
		t.Errorf("own token = %q", got)
	}

	ms, err := pv.Mounts(&pod.Spec.Containers[0], nil)
	if err != nil || len(ms) != 1 || ms[0] != (runtime.Mount{HostPath: dir, ContainerPath: AutomountPath, ReadOnly: true}) {
		t.Errorf("Mounts(app) = %v, %v; want the automounted volume read-only", ms, err)
	}
	ms, err = pv.Mounts(&pod.Spec.Containers[1], nil)
	if err != nil || len(ms) != 1 || ms[0].HostPath != own || !ms[0].ReadOnly {
		t.Errorf("Mounts(own-sa) = %v, %v; want only its own volume there, read-only", ms, err)
	}

	// A new token is written in place.
	objs.mu.Lock()
	objs.tokens[AutomountTokenVolume+"/token"] = "jwt-2"
	objs.mu.Unlock()
	mustSetup(t, m, pod)
	if got := readFile(t, filepath.Join(dir, "token")); got != "jwt-2" {
		t.Errorf("token after refresh = %q", got)
	}

	// The service account declines: no automounted volume.
	f := false
	pv, err = m.Setup(context.Background(), pod, SetupOptions{ServiceAccountAutomount: &f})
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := pv.Mounts(&pod.Spec.Containers[0], nil); len(ms) != 0 {
		t.Errorf("Mounts with the service account declining = %v", ms)
	}
}

func TestTokenOwnership(t *testing.T) {
	m, objs, _ := newTestManager(t)
	objs.tokens["p/token"] = "jwt"
	pod := testPod("u-tok", corev1.Volume{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: i32(0o644), Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: i64(1234)}
	mustSetup(t, m, pod)
	mode, uid, _ := statOf(t, filepath.Join(m.volumeDir("u-tok", pluginProjected, "p"), "token"))
	if mode.Perm() != 0o600 || uid != 1234 {
		t.Errorf("token of a pod running as 1234: mode %v uid %d, want 0600 owned by 1234", mode, uid)
	}
	if err := m.Teardown(context.Background(), "u-tok"); err != nil {
		t.Fatal(err)
	}
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: i64(77)}
	mustSetup(t, m, pod)
	mode, uid, gid := statOf(t, filepath.Join(m.volumeDir("u-tok", pluginProjected, "p"), "token"))
	if mode.Perm() != 0o640 || uid != 0 || gid != 77 {
		t.Errorf("token of a pod with fsGroup 77: mode %v uid %d gid %d, want 0640 root:77", mode, uid, gid)
	}
}

func TestTeardownAndSweep(t *testing.T) {
	m, objs, _ := newTestManager(t)
	objs.setSecret("shop", "s", map[string]string{"k": "v"})
	vols := []corev1.Volume{
		{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
		{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "disk", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	for _, uid := range []string{"u-a", "u-b", "u-c"} {
		pv := mustSetup(t, m, testPod(uid, vols...))
		c := &corev1.Container{Name: "app", VolumeMounts: []corev1.VolumeMount{{Name: "mem", MountPath: "/m", SubPath: "sub"}}}
		if _, err := pv.Mounts(c, nil); err != nil {
			t.Fatal(err)
		}
	}
	mounts, _ := readMountInfo()
	if n := len(mountsUnder(mounts, m.podDir("u-a"))); n != 3 {
		t.Fatalf("%d mounts for a pod, want 3 (two tmpfs, one bind)", n)
	}
	if err := m.Teardown(context.Background(), "u-a"); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	mounts, _ = readMountInfo()
	if left := mountsUnder(mounts, m.podDir("u-a")); len(left) != 0 {
		t.Errorf("mounts left after Teardown: %v", left)
	}
	if _, err := os.Lstat(m.podDir("u-a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod directory left after Teardown: %v", err)
	}
	if err := m.Teardown(context.Background(), "u-a"); err != nil {
		t.Errorf("second Teardown: %v", err)
	}
	os.WriteFile(filepath.Join(m.cfg.Dir, "stray-file"), nil, 0o644)
	if err := m.Sweep(context.Background(), func(uid string) bool { return uid == "u-b" }); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if _, err := os.Lstat(m.podDir("u-c")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Sweep left a pod not kept: %v", err)
	}
	if got := readFile(t, filepath.Join(m.volumeDir("u-b", pluginSecret, "s"), "k")); got != "v" {
		t.Errorf("Sweep touched a kept pod: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(m.cfg.Dir, "stray-file")); err != nil {
		t.Errorf("Sweep removed what is no pod directory: %v", err)
	}
	if err := m.Teardown(context.Background(), "../etc"); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Teardown(../etc) = %v", err)
	}
}

func TestUnsupportedAndOddSpecs(t *testing.T) {
	m, _, _ := newTestManager(t)
	for _, tc := range []struct {
		vol  corev1.Volume
		name string
	}{
		{corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}, "persistentVolumeClaim"},
		{corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/"}}}, "nfs"},
		{corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d"}}}, "csi"},
		{corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}, "ephemeral"},
		{corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "x"}}}, "image"},
		{corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePages}}}, "HugePages"},
	} {
		_, err := m.Setup(context.Background(), testPod("u-odd", tc.vol), SetupOptions{})
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("Setup(%s) = %v, want ErrUnsupported naming it", tc.name, err)
		}
	}
	for name, pod := range map[string]*corev1.Pod{
		"nil pod":      nil,
		"no uid":       testPod(""),
		"uid escapes":  testPod("../../x"),
		"uid is dot":   testPod("."),
		"bad name":     testPod("u-odd", corev1.Volume{Name: "../x"}),
		"empty name":   testPod("u-odd", corev1.Volume{}),
		"duplicate":    testPod("u-odd", corev1.Volume{Name: "a"}, corev1.Volume{Name: "a"}),
		"two sources":  testPod("u-odd", corev1.Volume{Name: "a", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}, HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}),
		"bad medium":   testPod("u-odd", corev1.Volume{Name: "a", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: "Tape"}}}),
		"bad item":     testPod("u-odd", corev1.Volume{Name: "a", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{Path: "../x", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}),
		"empty item":   testPod("u-odd", corev1.Volume{Name: "a", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{Path: "x"}}}}}),
		"data path":    testPod("u-odd", corev1.Volume{Name: "a", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{Path: "..data", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}),
		"empty source": testPod("u-odd", corev1.Volume{Name: "a", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{}}}}}),
	} {
		if _, err := m.Setup(context.Background(), pod, SetupOptions{}); err == nil {
			t.Errorf("%s: Setup accepted it", name)
		}
	}
}

// FuzzSetup sets up random pods (filled from the seed, then made safe to
// carry out on this machine: hostPaths under the test's directory) and
// makes the mounts of their containers: nothing may panic, and Teardown
// leaves nothing behind.
func FuzzSetup(f *testing.F) {
	for seed := range int64(24) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed int64) {
		m, objs, dir := newTestManager(t)
		fill := randfill.NewWithSeed(seed).NilChance(0.6).NumElements(0, 3).MaxDepth(8)
		var pod corev1.Pod
		fill.Fill(&pod)
		pod.UID = "u-fuzz"
		for i := range pod.Spec.Volumes {
			v := &pod.Spec.Volumes[i]
			if seed%5 != 0 { // else keep the random names, mostly refused
				v.Name = fmt.Sprintf("v%d", i)
			}
			if v.HostPath != nil {
				v.HostPath.Path = filepath.Join(dir, "host", filepath.Clean("/"+v.HostPath.Path))
			}
			if v.ConfigMap != nil && i%3 == 0 {
				objs.setConfigMap(pod.Namespace, v.ConfigMap.Name, map[string]string{"k": "v"})
			}
		}
		for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range cs {
				cs[i].Name = fmt.Sprintf("c%d", i)
				for j := range cs[i].VolumeMounts {
					if n := len(pod.Spec.Volumes); n > 0 && j%2 == 0 {
						cs[i].VolumeMounts[j].Name = pod.Spec.Volumes[j%n].Name
					}
				}
			}
		}
		pv, err := m.Setup(context.Background(), &pod, SetupOptions{})
		if err == nil {
			for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
				for i := range cs {
					_, _ = pv.Mounts(&cs[i], nil)
				}
			}
		}
		if err := m.Teardown(context.Background(), "u-fuzz"); err != nil {
			t.Fatalf("Teardown: %v", err)
		}
	})
}

func TestConcurrentPods(t *testing.T) {
	m, objs, _ := newTestManager(t)
	objs.setSecret("shop", "s", map[string]string{"k": "v"})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Go(func() {
			uid := fmt.Sprintf("u-par-%d", i)
			pod := testPod(uid, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}})
			for range 3 {
				if _, err := m.Setup(context.Background(), pod, SetupOptions{}); err != nil {
					errs <- err
					return
				}
			}
			if i%2 == 0 {
				errs <- m.Teardown(context.Background(), uid)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestTmpfsRoot checks the check that stands in for a look in mountinfo:
// a tmpfs mounted at a directory is found, a directory on disk or inside
// a tmpfs is not, whatever the data dir is on.
func TestTmpfsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts tmpfs")
	}
	dir := t.TempDir()
	mnt, sub := filepath.Join(dir, "mnt"), filepath.Join(dir, "mnt", "sub")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	check := func(p string, want bool) {
		t.Helper()
		got, err := tmpfsRoot(p)
		if err != nil || got != want {
			t.Errorf("tmpfsRoot(%s) = %v, %v; want %v", p, got, err, want)
		}
	}
	check(mnt, false)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	check(mnt, true)
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	check(sub, false) // inside a tmpfs, not its root: a volume here gets its own
	if _, err := tmpfsRoot(filepath.Join(dir, "missing")); err == nil {
		t.Error("tmpfsRoot of a missing directory: no error")
	}
}
