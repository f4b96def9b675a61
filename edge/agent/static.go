package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/outpost-mesh/outpost/internal/limitread"
	"github.com/outpost-mesh/outpost/sync/wire"
)

// Annotations of static pods and their mirrors, as kubelet sets them.
const (
	AnnotationConfigSource = "kubernetes.io/config.source"
	AnnotationConfigHash   = "kubernetes.io/config.hash"
	AnnotationConfigMirror = wire.AnnotationMirror
)

// maxManifestBytes bounds a static pod manifest.
const maxManifestBytes = 1 << 20

// staticManifest is one file of the manifests directory: its pod, or why
// it could not be read.
type staticManifest struct {
	path string
	pod  *corev1.Pod
	err  error
}

// readManifests reads the static pods in dir (*.yaml, *.yml, *.json; a
// missing directory holds none). A file that cannot be read is returned
// with its error and does not stop the others.
func readManifests(dir, node string) ([]staticManifest, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read manifests: %w", err)
	}
	var out []staticManifest
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !slices.Contains([]string{".yaml", ".yml", ".json"}, ext) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		pod, err := readManifest(path, node)
		out = append(out, staticManifest{path: path, pod: pod, err: err})
	}
	return out, nil
}

func readManifest(path, node string) (*corev1.Pod, error) {
	b, err := limitread.File(path, maxManifestBytes)
	if err != nil {
		return nil, err
	}
	var pod corev1.Pod
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(&pod); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if pod.Kind != "Pod" || (pod.APIVersion != "v1" && pod.APIVersion != "") {
		return nil, fmt.Errorf("%s: a static pod manifest holds a v1 Pod, not %s %s", path, pod.APIVersion, pod.Kind)
	}
	if pod.Name == "" {
		return nil, fmt.Errorf("%s: metadata.name is required", path)
	}
	// As kubelet: the name gets the node's, the UID is a hash of the
	// manifest and the node, the pod is bound to the node.
	sum := sha256.Sum256(append([]byte(node+"\x00"), b...))
	hash := hex.EncodeToString(sum[:16])
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Name = pod.Name + "-" + node
	pod.UID = types.UID(hash)
	pod.Spec.NodeName = node
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationConfigSource] = "file"
	pod.Annotations[AnnotationConfigHash] = hash
	defaultPod(&pod)
	return &pod, nil
}

// defaultPod fills what the hub's defaults would, for pods that never went
// through the hub (static pods).
func defaultPod(p *corev1.Pod) {
	if p.Spec.RestartPolicy == "" {
		p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if p.Spec.DNSPolicy == "" {
		p.Spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if p.Spec.TerminationGracePeriodSeconds == nil {
		g := int64(corev1.DefaultTerminationGracePeriodSeconds)
		p.Spec.TerminationGracePeriodSeconds = &g
	}
	if p.Spec.SchedulerName == "" {
		p.Spec.SchedulerName = corev1.DefaultSchedulerName
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			if c.ImagePullPolicy == "" {
				c.ImagePullPolicy = corev1.PullIfNotPresent
				if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image[strings.LastIndex(c.Image, "/")+1:], ":") {
					c.ImagePullPolicy = corev1.PullAlways
				}
			}
			if c.TerminationMessagePath == "" {
				c.TerminationMessagePath = corev1.TerminationMessagePathDefault
			}
			if c.TerminationMessagePolicy == "" {
				c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
			}
		}
	}
}

// mirrorOf returns the mirror pod of a static pod, as the hub shows it.
func mirrorOf(p *corev1.Pod) *corev1.Pod {
	m := p.DeepCopy()
	m.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	m.Annotations[AnnotationConfigMirror] = p.Annotations[AnnotationConfigHash]
	m.UID = "" // the hub gives the mirror its own
	m.ResourceVersion = ""
	return m
}
