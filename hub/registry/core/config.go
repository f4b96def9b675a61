package core

import (
	"encoding/json"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/outpost-mesh/outpost/hub/apiserver"
	"github.com/outpost-mesh/outpost/hub/registry/typed"
)

// ConfigMaps and Secrets: keys, total size, and the immutable flag.

var (
	dataPath       = field.NewPath("data")
	binaryDataPath = field.NewPath("binaryData")
	immutablePath  = field.NewPath("immutable")
)

const immutableMsg = "field is immutable when `immutable` is set"

func configMapResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "ConfigMap",
		Plural:       "configmaps",
		Singular:     "configmap",
		ShortNames:   []string{"cm"},
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.ConfigMap{} },
		NewList:      func() runtime.Object { return &corev1.ConfigMapList{} },
		AddToScheme:  corev1.AddToScheme,
		Rules: &typed.Rules[*corev1.ConfigMap]{
			Now:         now,
			Check:       validateConfigMap,
			CheckUpdate: validateConfigMapUpdate,
			TableColumns: []metav1.TableColumnDefinition{
				nameColumn,
				{Name: "Data", Type: "string", Description: corev1.ConfigMap{}.SwaggerDoc()["data"]},
				ageColumn,
			},
			TableRow: func(cm *corev1.ConfigMap, now time.Time) []interface{} {
				return []interface{}{cm.Name, int64(len(cm.Data) + len(cm.BinaryData)), age(cm.CreationTimestamp, now)}
			},
		},
	}
}

func validateConfigMap(cm *corev1.ConfigMap) field.ErrorList {
	errs := validateObjectMeta(&cm.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	size := 0
	for _, key := range sortedKeys(cm.Data) {
		errs = append(errs, validateDataKey(key, dataPath)...)
		if _, dup := cm.BinaryData[key]; dup {
			errs = append(errs, field.Invalid(dataPath.Key(key), key, "duplicate of key present in binaryData"))
		}
		size += len(cm.Data[key])
	}
	for _, key := range sortedKeys(cm.BinaryData) {
		errs = append(errs, validateDataKey(key, binaryDataPath)...)
		size += len(cm.BinaryData[key])
	}
	if size > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath(""), "", corev1.MaxSecretSize))
	}
	return errs
}

func validateConfigMapUpdate(cm, old *corev1.ConfigMap) field.ErrorList {
	errs := validateObjectMetaUpdate(&cm.ObjectMeta, &old.ObjectMeta)
	if old.Immutable != nil && *old.Immutable {
		if cm.Immutable == nil || !*cm.Immutable {
			errs = append(errs, field.Forbidden(immutablePath, immutableMsg))
		}
		if !reflect.DeepEqual(cm.Data, old.Data) {
			errs = append(errs, field.Forbidden(dataPath, immutableMsg))
		}
		if !reflect.DeepEqual(cm.BinaryData, old.BinaryData) {
			errs = append(errs, field.Forbidden(binaryDataPath, immutableMsg))
		}
	}
	return append(errs, validateConfigMap(cm)...)
}

func validateDataKey(key string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsConfigMapKey(key) {
		errs = append(errs, field.Invalid(fldPath.Key(key), key, msg))
	}
	return errs
}

func secretResource(now func() time.Time) apiserver.Resource {
	return apiserver.Resource{
		GroupVersion: corev1.SchemeGroupVersion,
		Kind:         "Secret",
		Plural:       "secrets",
		Singular:     "secret",
		Namespaced:   true,
		New:          func() runtime.Object { return &corev1.Secret{} },
		NewList:      func() runtime.Object { return &corev1.SecretList{} },
		AddToScheme:  corev1.AddToScheme,
		Rules: &typed.Rules[*corev1.Secret]{
			Now:         now,
			Defaults:    defaultSecret,
			Check:       validateSecret,
			CheckUpdate: validateSecretUpdate,
			FieldSet: func(s *corev1.Secret) fields.Set {
				return fields.Set{"type": string(s.Type)}
			},
			TableColumns: []metav1.TableColumnDefinition{
				nameColumn,
				{Name: "Type", Type: "string", Description: corev1.Secret{}.SwaggerDoc()["type"]},
				{Name: "Data", Type: "string", Description: corev1.Secret{}.SwaggerDoc()["data"]},
				ageColumn,
			},
			TableRow: func(s *corev1.Secret, now time.Time) []interface{} {
				return []interface{}{s.Name, string(s.Type), int64(len(s.Data)), age(s.CreationTimestamp, now)}
			},
		},
	}
}

// defaultSecret merges stringData into data, as the v1 conversion does
// (stringData is write-only and never stored), and makes the type Opaque
// when unset.
func defaultSecret(s *corev1.Secret) {
	if len(s.StringData) > 0 {
		if s.Data == nil {
			s.Data = make(map[string][]byte, len(s.StringData))
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
	}
	s.StringData = nil
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
}

func validateSecret(s *corev1.Secret) field.ErrorList {
	errs := validateObjectMeta(&s.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	size := 0
	for _, key := range sortedKeys(s.Data) {
		errs = append(errs, validateDataKey(key, dataPath)...)
		size += len(s.Data[key])
	}
	if size > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(dataPath, "", corev1.MaxSecretSize))
	}
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			errs = append(errs, field.Required(metadataPath.Child("annotations").Key(corev1.ServiceAccountNameKey), ""))
		}
	case corev1.SecretTypeDockercfg:
		errs = append(errs, validateJSONKey(s, corev1.DockerConfigKey)...)
	case corev1.SecretTypeDockerConfigJson:
		errs = append(errs, validateJSONKey(s, corev1.DockerConfigJsonKey)...)
	case corev1.SecretTypeBasicAuth:
		_, user := s.Data[corev1.BasicAuthUsernameKey]
		_, pass := s.Data[corev1.BasicAuthPasswordKey]
		if !user && !pass {
			errs = append(errs,
				field.Required(dataPath.Key(corev1.BasicAuthUsernameKey), ""),
				field.Required(dataPath.Key(corev1.BasicAuthPasswordKey), ""))
		}
	case corev1.SecretTypeSSHAuth:
		if len(s.Data[corev1.SSHAuthPrivateKey]) == 0 {
			errs = append(errs, field.Required(dataPath.Key(corev1.SSHAuthPrivateKey), ""))
		}
	case corev1.SecretTypeTLS:
		if _, ok := s.Data[corev1.TLSCertKey]; !ok {
			errs = append(errs, field.Required(dataPath.Key(corev1.TLSCertKey), ""))
		}
		if _, ok := s.Data[corev1.TLSPrivateKeyKey]; !ok {
			errs = append(errs, field.Required(dataPath.Key(corev1.TLSPrivateKeyKey), ""))
		}
	}
	return errs
}

// validateJSONKey requires data[key] to hold well-formed JSON, as the
// docker config secret types do.
func validateJSONKey(s *corev1.Secret, key string) field.ErrorList {
	b, ok := s.Data[key]
	if !ok {
		return field.ErrorList{field.Required(dataPath.Key(key), "")}
	}
	if err := json.Unmarshal(b, &map[string]interface{}{}); err != nil {
		return field.ErrorList{field.Invalid(dataPath.Key(key), "<secret contents redacted>", err.Error())}
	}
	return nil
}

func validateSecretUpdate(s, old *corev1.Secret) field.ErrorList {
	errs := validateObjectMetaUpdate(&s.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, validateImmutable(s.Type, old.Type, field.NewPath("type"))...)
	if old.Immutable != nil && *old.Immutable {
		if s.Immutable == nil || !*s.Immutable {
			errs = append(errs, field.Forbidden(immutablePath, immutableMsg))
		}
		if !reflect.DeepEqual(s.Data, old.Data) {
			errs = append(errs, field.Forbidden(dataPath, immutableMsg))
		}
	}
	return append(errs, validateSecret(s)...)
}

// sortedKeys returns the keys of m in order, for errors in a stable order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
