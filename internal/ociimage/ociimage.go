// Package ociimage builds small container images from files of this
// machine and writes them as OCI image layouts or docker archives, or
// pushes them to a registry: the images of Outpost's tests, benchmarks and
// demo, since no public registry can be reached from the machines they run
// on. It is not a general image builder: one layer, no base image.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Media types written.
const (
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// epoch is the time every file of a layer carries, so that the same
// inputs give the same digests.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// File is one entry of the image's single layer.
type File struct {
	Path     string      // absolute path in the image, such as "/bin/sh"
	Mode     os.FileMode // permission bits, with os.ModeDir or os.ModeSymlink for those
	Content  []byte      // a regular file's content
	Linkname string      // a symlink's target
	UID, GID int
}

// Config is the image's runtime configuration, as an OCI image config's
// "config" object holds it.
type Config struct {
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	Env        []string `json:"Env,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
	User       string   `json:"User,omitempty"`
	StopSignal string   `json:"StopSignal,omitempty"`
}

// Image is a one-layer image. Build it with New and Add, then write it.
type Image struct {
	Name   string // the reference it is written under, such as "outpost.test/busybox:1"
	Config Config
	Arch   string // GOARCH of the files; "" for this machine's
	files  []File
}

// New returns an empty image named name.
func New(name string, cfg Config) *Image {
	return &Image{Name: name, Config: cfg}
}

// Add adds files to the layer. Parent directories are added as needed.
func (im *Image) Add(files ...File) { im.files = append(im.files, files...) }

// AddHostFile adds the file at host path src as dst in the image, with
// src's permission bits.
func (im *Image) AddHostFile(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("add %s: %w", src, err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("add %s: %w", src, err)
	}
	im.Add(File{Path: dst, Mode: fi.Mode().Perm(), Content: b})
	return nil
}

// BusyboxPath is where Debian's busybox-static installs busybox.
const BusyboxPath = "/bin/busybox"

// ErrNoBusybox is returned by Busybox when busybox is not at BusyboxPath.
var ErrNoBusybox = errors.New("no static busybox at " + BusyboxPath + ": install Debian's busybox-static")

// busyboxApplets are the applets linked into a Busybox image: what the
// tests and the demo run. (Its wget crashes without a libc's resolver
// files; nc serves instead.) tar is what kubectl cp runs, stty and tty
// what terminal tests look at.
var busyboxApplets = []string{
	"sh", "ash", "cat", "chmod", "cp", "date", "echo", "env", "false", "grep",
	"head", "hostname", "httpd", "id", "ip", "kill", "ls", "mkdir", "mount",
	"nc", "nslookup", "ps", "pwd", "rm", "seq", "sleep", "stat", "tail",
	"tee", "test", "timeout", "top", "touch", "tr", "true", "uname", "wc",
	"yes", "dd", "sync", "trap", "tar", "stty", "tty", "sha256sum",
}

// Busybox returns an image named name holding the static busybox of this
// machine with the common applets linked in /bin, an /etc/passwd and
// /etc/group with root and nobody (65534), and /tmp; its command is sh.
func Busybox(name string) (*Image, error) {
	b, err := os.ReadFile(BusyboxPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoBusybox
	}
	if err != nil {
		return nil, fmt.Errorf("read busybox: %w", err)
	}
	im := New(name, Config{
		Cmd: []string{"sh"},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	})
	im.Add(File{Path: "/bin/busybox", Mode: 0o755, Content: b})
	for _, a := range busyboxApplets {
		im.Add(File{Path: "/bin/" + a, Mode: os.ModeSymlink | 0o777, Linkname: "busybox"})
	}
	im.Add(
		File{Path: "/etc/passwd", Mode: 0o644, Content: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		File{Path: "/etc/group", Mode: 0o644, Content: []byte("root:x:0:\nnogroup:x:65534:\n")},
		File{Path: "/tmp", Mode: os.ModeDir | os.ModeSticky | 0o777},
		File{Path: "/root", Mode: os.ModeDir | 0o700},
		File{Path: "/var/www", Mode: os.ModeDir | 0o755},
	)
	return im, nil
}

// blob is one content-addressed blob.
type blob struct {
	mediaType string
	digest    string // "sha256:..."
	data      []byte
}

func newBlob(mediaType string, data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{mediaType, "sha256:" + hex.EncodeToString(sum[:]), data}
}

func (b blob) descriptor() map[string]any {
	return map[string]any{"mediaType": b.mediaType, "digest": b.digest, "size": len(b.data)}
}

// built is an image's blobs: the layer (compressed, and its tar for
// docker archives), the config and the manifest.
type built struct {
	layerTar []byte
	layer    blob
	config   blob
	manifest blob
}

// build lays the image out.
func (im *Image) build() (*built, error) {
	if im.Name == "" {
		return nil, errors.New("image has no name")
	}
	tarball, err := im.layer()
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	zw.ModTime = epoch
	if _, err := zw.Write(tarball); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	diffSum := sha256.Sum256(tarball)
	arch := im.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	cfg, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": arch,
		"os":           "linux",
		"config":       im.Config,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffSum[:])}},
	})
	if err != nil {
		return nil, err
	}
	b := &built{layerTar: tarball, layer: newBlob(MediaTypeLayer, gz.Bytes()), config: newBlob(MediaTypeConfig, cfg)}
	man, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeManifest,
		"config":        b.config.descriptor(),
		"layers":        []any{b.layer.descriptor()},
	})
	if err != nil {
		return nil, err
	}
	b.manifest = newBlob(MediaTypeManifest, man)
	return b, nil
}

// layer returns the layer's tar: the files in path order, each parent
// directory before its children.
func (im *Image) layer() ([]byte, error) {
	entries := map[string]File{}
	for _, f := range im.files {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			return nil, fmt.Errorf("file %q: not a file path", f.Path)
		}
		f.Path = p
		entries[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = File{Path: d, Mode: os.ModeDir | 0o755}
			}
		}
	}
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := entries[p]
		h := &tar.Header{
			Name: strings.TrimPrefix(p, "/"), Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID,
			ModTime: epoch, Format: tar.FormatPAX,
		}
		if f.Mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		switch {
		case f.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case f.Mode&os.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Linkname
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Content))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Content); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteOCI writes the image to w as a tar of an OCI image layout whose
// index names it (annotation org.opencontainers.image.ref.name, which
// containerd's importer reads, and io.containerd.image.name).
func (im *Image) WriteOCI(w io.Writer) error {
	b, err := im.build()
	if err != nil {
		return err
	}
	desc := b.manifest.descriptor()
	desc["annotations"] = map[string]string{
		"org.opencontainers.image.ref.name": im.Name,
		"io.containerd.image.name":          im.Name,
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": MediaTypeIndex, "manifests": []any{desc}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
	}
	for _, bl := range []blob{b.layer, b.config, b.manifest} {
		files = append(files, struct {
			name string
			data []byte
		}{"blobs/sha256/" + strings.TrimPrefix(bl.digest, "sha256:"), bl.data})
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := writeTarFile(tw, f.name, f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// WriteDockerArchive writes the image to w as `docker save` does: a tar
// with manifest.json naming it in RepoTags, its config and its layer.
func (im *Image) WriteDockerArchive(w io.Writer) error {
	b, err := im.build()
	if err != nil {
		return err
	}
	cfgName := strings.TrimPrefix(b.config.digest, "sha256:") + ".json"
	layerSum := sha256.Sum256(b.layerTar)
	layerName := hex.EncodeToString(layerSum[:]) + "/layer.tar"
	man, err := json.Marshal([]any{map[string]any{
		"Config": cfgName, "RepoTags": []string{dockerTag(im.Name)}, "Layers": []string{layerName},
	}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := writeTarFile(tw, cfgName, b.config.data); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: path.Dir(layerName) + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
		return err
	}
	if err := writeTarFile(tw, layerName, b.layerTar); err != nil {
		return err
	}
	if err := writeTarFile(tw, "manifest.json", man); err != nil {
		return err
	}
	return tw.Close()
}

// dockerTag returns name as docker archives hold it: with a tag.
func dockerTag(name string) string {
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		return name
	}
	return name + ":latest"
}

func writeTarFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// WriteFile writes the image to file (created or replaced atomically) as
// an OCI layout tar, or a docker archive if docker is set.
func (im *Image) WriteFile(file string, docker bool) error {
	tmp, err := os.CreateTemp(path.Dir(file), ".ociimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if docker {
		err = im.WriteDockerArchive(tmp)
	} else {
		err = im.WriteOCI(tmp)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write image %s: %w", file, err)
	}
	return os.Rename(tmp.Name(), file)
}
