package core

// Pod volumes and the downward API.

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func validateVolumes(volumes []corev1.Volume, podMeta *metav1.ObjectMeta, fldPath *field.Path) (map[string]corev1.VolumeSource, field.ErrorList) {
	var errs field.ErrorList
	names := sets.New[string]()
	vols := make(map[string]corev1.VolumeSource, len(volumes))
	for i, v := range volumes {
		idxPath := fldPath.Index(i)
		namePath := idxPath.Child("name")
		el := validateVolumeSource(&v.VolumeSource, idxPath, v.Name, podMeta)
		if v.Name == "" {
			el = append(el, field.Required(namePath, ""))
		} else {
			el = append(el, validateDNS1123Label(v.Name, namePath)...)
		}
		if names.Has(v.Name) {
			el = append(el, field.Duplicate(namePath, v.Name))
		}
		if len(el) == 0 {
			names.Insert(v.Name)
			vols[v.Name] = v.VolumeSource
		} else {
			errs = append(errs, el...)
		}
	}
	return vols, errs
}

func validateVolumeSource(s *corev1.VolumeSource, fldPath *field.Path, volName string, podMeta *metav1.ObjectMeta) field.ErrorList {
	// The sources in upstream's order; those without a check here are
	// counted, so that two sources in one volume are still refused.
	sources := []volumeSource{
		{"emptyDir", s.EmptyDir != nil, func(p *field.Path) field.ErrorList {
			if l := s.EmptyDir.SizeLimit; l != nil && l.Sign() < 0 {
				return field.ErrorList{field.Forbidden(p.Child("sizeLimit"), "SizeLimit field must be a valid resource quantity")}
			}
			return nil
		}},
		{"hostPath", s.HostPath != nil, func(p *field.Path) field.ErrorList { return validateHostPathVolume(s.HostPath, p) }},
		{"gitRepo", s.GitRepo != nil, func(p *field.Path) field.ErrorList {
			var errs field.ErrorList
			if s.GitRepo.Repository == "" {
				errs = append(errs, field.Required(p.Child("repository"), ""))
			}
			return append(errs, validateLocalDescendingPath(s.GitRepo.Directory, p.Child("directory"))...)
		}},
		{"gcePersistentDisk", s.GCEPersistentDisk != nil, nil},
		{"awsElasticBlockStore", s.AWSElasticBlockStore != nil, nil},
		{"secret", s.Secret != nil, func(p *field.Path) field.ErrorList {
			var errs field.ErrorList
			if s.Secret.SecretName == "" {
				errs = append(errs, field.Required(p.Child("secretName"), ""))
			}
			errs = append(errs, validateFileMode(s.Secret.DefaultMode, p.Child("defaultMode"))...)
			for i := range s.Secret.Items {
				errs = append(errs, validateKeyToPath(&s.Secret.Items[i], p.Child("items").Index(i))...)
			}
			return errs
		}},
		{"nfs", s.NFS != nil, func(p *field.Path) field.ErrorList { return validateNFSVolume(s.NFS, p) }},
		{"iscsi", s.ISCSI != nil, nil},
		{"glusterfs", s.Glusterfs != nil, nil},
		{"flocker", s.Flocker != nil, nil},
		{"persistentVolumeClaim", s.PersistentVolumeClaim != nil, func(p *field.Path) field.ErrorList {
			if s.PersistentVolumeClaim.ClaimName == "" {
				return field.ErrorList{field.Required(p.Child("claimName"), "")}
			}
			return nil
		}},
		{"rbd", s.RBD != nil, nil},
		{"cinder", s.Cinder != nil, nil},
		{"cephFS", s.CephFS != nil, nil},
		{"quobyte", s.Quobyte != nil, nil},
		{"downwardAPI", s.DownwardAPI != nil, func(p *field.Path) field.ErrorList {
			errs := validateFileMode(s.DownwardAPI.DefaultMode, p.Child("defaultMode"))
			for i := range s.DownwardAPI.Items {
				errs = append(errs, validateDownwardAPIVolumeFile(&s.DownwardAPI.Items[i], p)...)
			}
			return errs
		}},
		{"fc", s.FC != nil, nil},
		{"flexVolume", s.FlexVolume != nil, nil},
		{"configMap", s.ConfigMap != nil, func(p *field.Path) field.ErrorList {
			var errs field.ErrorList
			if s.ConfigMap.Name == "" {
				errs = append(errs, field.Required(p.Child("name"), ""))
			}
			errs = append(errs, validateFileMode(s.ConfigMap.DefaultMode, p.Child("defaultMode"))...)
			for i := range s.ConfigMap.Items {
				errs = append(errs, validateKeyToPath(&s.ConfigMap.Items[i], p.Child("items").Index(i))...)
			}
			return errs
		}},
		{"azureFile", s.AzureFile != nil, nil},
		{"vsphereVolume", s.VsphereVolume != nil, nil},
		{"photonPersistentDisk", s.PhotonPersistentDisk != nil, nil},
		{"portworxVolume", s.PortworxVolume != nil, nil},
		{"azureDisk", s.AzureDisk != nil, nil},
		{"storageos", s.StorageOS != nil, nil},
		{"projected", s.Projected != nil, func(p *field.Path) field.ErrorList { return validateProjectedVolume(s.Projected, p) }},
		{"scaleIO", s.ScaleIO != nil, nil},
		{"csi", s.CSI != nil, func(p *field.Path) field.ErrorList {
			errs := ValidateCSIDriverName(s.CSI.Driver, p.Child("driver"))
			if r := s.CSI.NodePublishSecretRef; r != nil && r.Name == "" {
				errs = append(errs, field.Required(p.Child("nodePublishSecretRef", "name"), ""))
			}
			return errs
		}},
		{"ephemeral", s.Ephemeral != nil, func(p *field.Path) field.ErrorList {
			if s.Ephemeral.VolumeClaimTemplate == nil {
				return field.ErrorList{field.Required(p.Child("volumeClaimTemplate"), "")}
			}
			if podMeta != nil && podMeta.Name != "" && volName != "" {
				pvc := podMeta.Name + "-" + volName
				var errs field.ErrorList
				for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(pvc, false) {
					errs = append(errs, field.Invalid(fldPath.Child("name"), volName, fmt.Sprintf("PVC name %q: %v", pvc, msg)))
				}
				return errs
			}
			return nil
		}},
		{"image", s.Image != nil, func(p *field.Path) field.ErrorList {
			var errs field.ErrorList
			if s.Image.Reference == "" {
				errs = append(errs, field.Required(p.Child("reference"), ""))
			}
			return append(errs, validateEnum(s.Image.PullPolicy, p.Child("pullPolicy"), corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)...)
		}},
	}
	return oneVolumeSource(sources, fldPath)
}

func validateNFSVolume(nfs *corev1.NFSVolumeSource, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if nfs.Server == "" {
		errs = append(errs, field.Required(fldPath.Child("server"), ""))
	}
	if nfs.Path == "" {
		errs = append(errs, field.Required(fldPath.Child("path"), ""))
	}
	if !strings.HasPrefix(nfs.Path, "/") {
		errs = append(errs, field.Invalid(fldPath.Child("path"), nfs.Path, "must be an absolute path"))
	}
	return errs
}

// ValidateCSIDriverName checks the name of a CSI driver found at fldPath
// (a volume's driver, a CSIDriver's or CSINode driver's name) as upstream
// does: required, at most 63 characters, and a DNS subdomain once
// lowercased.
func ValidateCSIDriverName(driver string, fldPath *field.Path) field.ErrorList {
	switch {
	case driver == "":
		return field.ErrorList{field.Required(fldPath, "")}
	case len(driver) > 63:
		return field.ErrorList{field.TooLong(fldPath, driver, 63)}
	default:
		return validateDNS1123Subdomain(strings.ToLower(driver), fldPath)
	}
}

var supportedHostPathTypes = []corev1.HostPathType{
	corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFileOrCreate,
	corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev,
}

func validateHostPathVolume(h *corev1.HostPathVolumeSource, fldPath *field.Path) field.ErrorList {
	if h.Path == "" {
		return field.ErrorList{field.Required(fldPath.Child("path"), "")}
	}
	errs := validatePathNoBacksteps(h.Path, fldPath.Child("path"))
	if h.Type != nil {
		ok := false
		for _, t := range supportedHostPathTypes {
			ok = ok || *h.Type == t
		}
		if !ok {
			errs = append(errs, field.NotSupported(fldPath.Child("type"), h.Type, supportedHostPathTypes))
		}
	}
	return errs
}

func validateFileMode(mode *int32, fldPath *field.Path) field.ErrorList {
	if mode != nil && (*mode > 0777 || *mode < 0) {
		return field.ErrorList{field.Invalid(fldPath, *mode, fileModeErrorMsg)}
	}
	return nil
}

func validateKeyToPath(kp *corev1.KeyToPath, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if kp.Key == "" {
		errs = append(errs, field.Required(fldPath.Child("key"), ""))
	}
	if kp.Path == "" {
		errs = append(errs, field.Required(fldPath.Child("path"), ""))
	}
	errs = append(errs, validateLocalNonReservedPath(kp.Path, fldPath.Child("path"))...)
	return append(errs, validateFileMode(kp.Mode, fldPath.Child("mode"))...)
}

func validateProjectedVolume(p *corev1.ProjectedVolumeSource, fldPath *field.Path) field.ErrorList {
	errs := validateFileMode(p.DefaultMode, fldPath.Child("defaultMode"))
	paths := sets.New[string]()
	addPath := func(path, name string) {
		if path == "" {
			return
		}
		if paths.Has(path) {
			errs = append(errs, field.Invalid(fldPath, name, "conflicting duplicate paths"))
		}
		paths.Insert(path)
	}
	for i, src := range p.Sources {
		srcPath := fldPath.Child("sources").Index(i)
		n := 0
		if src.Secret != nil {
			n++
			pp := srcPath.Child("secret")
			if src.Secret.Name == "" {
				errs = append(errs, field.Required(pp.Child("name"), ""))
			}
			for j := range src.Secret.Items {
				errs = append(errs, validateKeyToPath(&src.Secret.Items[j], pp.Child("items").Index(j))...)
				addPath(src.Secret.Items[j].Path, src.Secret.Name)
			}
		}
		if src.ConfigMap != nil {
			n++
			pp := srcPath.Child("configMap")
			if src.ConfigMap.Name == "" {
				errs = append(errs, field.Required(pp.Child("name"), ""))
			}
			for j := range src.ConfigMap.Items {
				errs = append(errs, validateKeyToPath(&src.ConfigMap.Items[j], pp.Child("items").Index(j))...)
				addPath(src.ConfigMap.Items[j].Path, src.ConfigMap.Name)
			}
		}
		if src.DownwardAPI != nil {
			n++
			pp := srcPath.Child("downwardAPI")
			for j := range src.DownwardAPI.Items {
				errs = append(errs, validateDownwardAPIVolumeFile(&src.DownwardAPI.Items[j], pp)...)
				addPath(src.DownwardAPI.Items[j].Path, src.DownwardAPI.Items[j].Path)
			}
		}
		if t := src.ServiceAccountToken; t != nil {
			n++
			pp := srcPath.Child("serviceAccountToken")
			if t.ExpirationSeconds != nil {
				if *t.ExpirationSeconds < 10*60 {
					errs = append(errs, field.Invalid(pp.Child("expirationSeconds"), *t.ExpirationSeconds, "may not specify a duration less than 10 minutes"))
				}
				if *t.ExpirationSeconds > 1<<32 {
					errs = append(errs, field.Invalid(pp.Child("expirationSeconds"), *t.ExpirationSeconds, "may not specify a duration larger than 2^32 seconds"))
				}
			}
			if t.Path == "" {
				errs = append(errs, field.Required(fldPath.Child("path"), ""))
			} else {
				errs = append(errs, validateLocalNonReservedPath(t.Path, fldPath.Child("path"))...)
			}
		}
		if src.ClusterTrustBundle != nil {
			n++
			addPath(src.ClusterTrustBundle.Path, src.ClusterTrustBundle.Path)
		}
		if src.PodCertificate != nil {
			n++
		}
		if n > 1 {
			errs = append(errs, field.Forbidden(srcPath, "may not specify more than 1 volume type per source"))
		}
	}
	return errs
}

var (
	volumeFieldPaths = sets.New("metadata.name", "metadata.namespace", "metadata.labels", "metadata.annotations", "metadata.uid")
	envFieldPaths    = sets.New("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
		"status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs")
	resourceFieldPaths = sets.New("limits.cpu", "limits.memory", "limits.ephemeral-storage",
		"requests.cpu", "requests.memory", "requests.ephemeral-storage")
)

func validateDownwardAPIVolumeFile(f *corev1.DownwardAPIVolumeFile, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if f.Path == "" {
		errs = append(errs, field.Required(fldPath.Child("path"), ""))
	}
	errs = append(errs, validateLocalNonReservedPath(f.Path, fldPath.Child("path"))...)
	switch {
	case f.FieldRef != nil:
		errs = append(errs, validateObjectFieldSelector(f.FieldRef, volumeFieldPaths, fldPath.Child("fieldRef"))...)
		if f.ResourceFieldRef != nil {
			errs = append(errs, field.Invalid(fldPath, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		}
	case f.ResourceFieldRef != nil:
		errs = append(errs, validateResourceFieldSelector(f.ResourceFieldRef, true, fldPath.Child("resourceFieldRef"))...)
	default:
		errs = append(errs, field.Required(fldPath, "one of fieldRef and resourceFieldRef is required"))
	}
	return append(errs, validateFileMode(f.Mode, fldPath.Child("mode"))...)
}

// validateObjectFieldSelector checks a downward API fieldRef against the
// paths valid where it is used; metadata.labels['k'] and
// metadata.annotations['k'] are always valid.
func validateObjectFieldSelector(fs *corev1.ObjectFieldSelector, valid sets.Set[string], fldPath *field.Path) field.ErrorList {
	if fs.APIVersion == "" {
		return field.ErrorList{field.Required(fldPath.Child("apiVersion"), "")}
	}
	if fs.FieldPath == "" {
		return field.ErrorList{field.Required(fldPath.Child("fieldPath"), "")}
	}
	if fs.APIVersion != "v1" {
		return field.ErrorList{field.Invalid(fldPath.Child("fieldPath"), fs.FieldPath, fmt.Sprintf("error converting fieldPath: unsupported pod version: %s", fs.APIVersion))}
	}
	if p, subscript, ok := splitSubscriptedPath(fs.FieldPath); ok {
		switch p {
		case "metadata.annotations":
			return validateQualifiedName(strings.ToLower(subscript), fldPath)
		case "metadata.labels":
			return validateQualifiedName(subscript, fldPath)
		default:
			return field.ErrorList{field.Invalid(fldPath.Child("fieldPath"), fs.FieldPath, fmt.Sprintf("error converting fieldPath: field label does not support subscript: %s", fs.FieldPath))}
		}
	}
	p := fs.FieldPath
	switch p {
	case "metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid",
		"spec.nodeName", "spec.restartPolicy", "spec.serviceAccountName", "spec.schedulerName",
		"status.phase", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs":
	case "spec.host":
		p = "spec.nodeName"
	default:
		return field.ErrorList{field.Invalid(fldPath.Child("fieldPath"), fs.FieldPath, fmt.Sprintf("error converting fieldPath: field label not supported: %s", fs.FieldPath))}
	}
	if !valid.Has(p) {
		return field.ErrorList{field.NotSupported(fldPath.Child("fieldPath"), p, sets.List(valid))}
	}
	return nil
}

// splitSubscriptedPath splits "metadata.labels['k']" into
// "metadata.labels" and "k".
func splitSubscriptedPath(p string) (string, string, bool) {
	if !strings.HasSuffix(p, "']") {
		return p, "", false
	}
	parts := strings.SplitN(strings.TrimSuffix(p, "']"), "['", 2)
	if len(parts) < 2 || parts[0] == "" {
		return p, "", false
	}
	return parts[0], parts[1], true
}

func validateResourceFieldSelector(fs *corev1.ResourceFieldSelector, inVolume bool, fldPath *field.Path) field.ErrorList {
	switch {
	case inVolume && fs.ContainerName == "":
		return field.ErrorList{field.Required(fldPath.Child("containerName"), "")}
	case fs.Resource == "":
		return field.ErrorList{field.Required(fldPath.Child("resource"), "")}
	case !resourceFieldPaths.Has(fs.Resource) &&
		!strings.HasPrefix(fs.Resource, "requests."+hugePagesPrefix) && !strings.HasPrefix(fs.Resource, "limits."+hugePagesPrefix):
		return field.ErrorList{field.NotSupported(fldPath.Child("resource"), fs.Resource, sets.List(resourceFieldPaths))}
	}
	return nil
}

// volumeSource is one of the sources a volume may name, set or not, with
// its checks (nil for none).
type volumeSource struct {
	name     string
	set      bool
	validate func(*field.Path) field.ErrorList
}

// oneVolumeSource checks that exactly one of sources is set, as upstream
// requires of pods' volumes and persistent volumes, and checks that one.
func oneVolumeSource(sources []volumeSource, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	for _, src := range sources {
		if !src.set {
			continue
		}
		p := fldPath.Child(src.name)
		if n > 0 {
			errs = append(errs, field.Forbidden(p, "may not specify more than 1 volume type"))
			continue
		}
		n++
		if src.validate != nil {
			errs = append(errs, src.validate(p)...)
		}
	}
	if n == 0 {
		errs = append(errs, field.Required(fldPath, "must specify a volume type"))
	}
	return errs
}
