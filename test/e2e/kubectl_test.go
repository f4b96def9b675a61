package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestKubectl drives the hub with kubectl 1.27 and 1.33, the oldest and the
// newest installed, each against its own hub, through what a user does day
// to day, and checks what kubectl prints. The hub runs no controllers and
// has no nodes, so pods stay Pending and only what the test made exists.
func TestKubectl(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds outpost and runs hubs; skipped with -short")
	}
	for _, version := range []string{"1.27", "1.33"} {
		t.Run("kubectl-"+version, func(t *testing.T) {
			t.Parallel()
			k := newKubectl(t, version)
			// The API as kubectl sees it, without controllers: the
			// test checks exactly what it made (TestWorkloads drives
			// the controllers).
			h := startHub(t, "--controllers=false")
			k.kubeconfig = h.kubeconfig
			k.namespace = "e2e-" + strings.ReplaceAll(version, ".", "-")
			testKubectl(t, k)
		})
	}
}

// testKubectl runs the steps in order; later steps use what earlier ones
// made, so a failed setup step ends the test.
func testKubectl(t *testing.T, k *kubectl) {
	ns := k.namespace

	t.Run("version", func(t *testing.T) {
		r := k.run(t, "version", "-o", "json")
		var v struct {
			ServerVersion struct {
				Major, Minor, GitVersion string
			}
		}
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("decode: %v\n%s", err, r)
		}
		sv := v.ServerVersion
		wantEqual(t, "serverVersion.major", sv.Major, "1")
		if _, err := strconv.Atoi(sv.Minor); err != nil {
			t.Errorf("serverVersion.minor = %q, want a number\n%s", sv.Minor, r)
		}
		if !strings.HasPrefix(sv.GitVersion, "v1."+sv.Minor+".") {
			t.Errorf("serverVersion.gitVersion = %q, want v1.%s.*\n%s", sv.GitVersion, sv.Minor, r)
		}
		// The line users read; 1.27 prints the whole version.Info in it.
		r = k.run(t, "version")
		wantMatch(t, r, r.stdout, `(?m)^Server Version: .*`+regexp.QuoteMeta(sv.GitVersion))
		wantMatch(t, r, r.stdout, `(?m)^Client Version: .*v`+regexp.QuoteMeta(k.version)+`\.`)
	})

	t.Run("api-resources", func(t *testing.T) {
		r := k.run(t, "api-resources")
		type row struct{ short, namespaced, kind string }
		got := map[string]row{} // by name and API version
		for _, l := range r.lines()[1:] {
			f := strings.Fields(l)
			switch len(f) {
			case 4: // no short names
				got[f[0]+" "+f[1]] = row{"", f[2], f[3]}
			case 5:
				got[f[0]+" "+f[2]] = row{f[1], f[3], f[4]}
			default:
				t.Errorf("api-resources line %q: want 4 or 5 columns", l)
			}
		}
		for key, want := range map[string]row{
			"pods v1":                       {"po", "true", "Pod"},
			"services v1":                   {"svc", "true", "Service"},
			"configmaps v1":                 {"cm", "true", "ConfigMap"},
			"secrets v1":                    {"", "true", "Secret"},
			"namespaces v1":                 {"ns", "false", "Namespace"},
			"nodes v1":                      {"no", "false", "Node"},
			"serviceaccounts v1":            {"sa", "true", "ServiceAccount"},
			"deployments apps/v1":           {"deploy", "true", "Deployment"},
			"replicasets apps/v1":           {"rs", "true", "ReplicaSet"},
			"daemonsets apps/v1":            {"ds", "true", "DaemonSet"},
			"statefulsets apps/v1":          {"sts", "true", "StatefulSet"},
			"jobs batch/v1":                 {"", "true", "Job"},
			"cronjobs batch/v1":             {"cj", "true", "CronJob"},
			"leases coordination.k8s.io/v1": {"", "true", "Lease"},
		} {
			if g, ok := got[key]; !ok {
				t.Errorf("api-resources lacks %s\n%s", key, r)
			} else if g != want {
				t.Errorf("api-resources %s = %+v, want %+v", key, g, want)
			}
		}
	})

	if !t.Run("create namespace", func(t *testing.T) {
		r := k.run(t, "create", "namespace", ns)
		wantLines(t, r, "namespace/"+ns+" created")
		wantEqual(t, "namespace phase", k.jsonpath(t, "{.status.phase}", "namespace", ns), "Active")
	}) {
		return
	}

	if !t.Run("apply", func(t *testing.T) {
		r := k.run(t, "apply", "-f", "testdata/app.yaml")
		wantLines(t, r,
			"deployment.apps/web created",
			"service/web created",
			"configmap/web-config created",
			"secret/web-secret created")
		r = k.run(t, "apply", "-f", "testdata/app.yaml")
		wantLines(t, r,
			"deployment.apps/web unchanged",
			"service/web unchanged",
			"configmap/web-config unchanged",
			"secret/web-secret unchanged")
	}) {
		return
	}

	t.Run("get -o yaml", func(t *testing.T) {
		r := k.run(t, "get", "deployment", "web", "-o", "yaml")
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("decode: %v\n%s", err, r)
		}
		// The defaults upstream's API server fills in.
		wantEqual(t, "generation", d.Generation, 1)
		wantEqual(t, "uid set", d.UID != "", true)
		wantEqual(t, "strategy.type", d.Spec.Strategy.Type, appsv1.RollingUpdateDeploymentStrategyType)
		if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxUnavailable == nil {
			t.Errorf("strategy.rollingUpdate = %+v, want maxSurge and maxUnavailable\n%s", ru, r)
		} else {
			wantEqual(t, "maxSurge", ru.MaxSurge.String(), "25%")
			wantEqual(t, "maxUnavailable", ru.MaxUnavailable.String(), "25%")
		}
		wantEqual(t, "revisionHistoryLimit", deref(d.Spec.RevisionHistoryLimit), 10)
		wantEqual(t, "progressDeadlineSeconds", deref(d.Spec.ProgressDeadlineSeconds), 600)
		ps := d.Spec.Template.Spec
		wantEqual(t, "restartPolicy", ps.RestartPolicy, corev1.RestartPolicyAlways)
		wantEqual(t, "dnsPolicy", ps.DNSPolicy, corev1.DNSClusterFirst)
		wantEqual(t, "schedulerName", ps.SchedulerName, "default-scheduler")
		wantEqual(t, "terminationGracePeriodSeconds", deref(ps.TerminationGracePeriodSeconds), 30)
		if len(ps.Containers) != 1 || len(ps.Containers[0].Ports) != 1 {
			t.Fatalf("containers = %+v, want one with one port\n%s", ps.Containers, r)
		}
		c := ps.Containers[0]
		wantEqual(t, "imagePullPolicy", c.ImagePullPolicy, corev1.PullIfNotPresent) // tagged, not :latest
		wantEqual(t, "terminationMessagePath", c.TerminationMessagePath, "/dev/termination-log")
		wantEqual(t, "terminationMessagePolicy", c.TerminationMessagePolicy, corev1.TerminationMessageReadFile)
		wantEqual(t, "ports[0].protocol", c.Ports[0].Protocol, corev1.ProtocolTCP)
		// What a user reads, as printed.
		wantContains(t, r, r.stdout, "restartPolicy: Always", "dnsPolicy: ClusterFirst",
			"imagePullPolicy: IfNotPresent", "type: RollingUpdate", "maxSurge: 25%", "revisionHistoryLimit: 10")

		r = k.run(t, "get", "service", "web", "-o", "yaml")
		var s corev1.Service
		if err := yaml.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("decode: %v\n%s", err, r)
		}
		wantEqual(t, "service type", s.Spec.Type, corev1.ServiceTypeClusterIP)
		wantEqual(t, "sessionAffinity", s.Spec.SessionAffinity, corev1.ServiceAffinityNone)
		if len(s.Spec.Ports) != 1 {
			t.Fatalf("ports = %+v, want one\n%s", s.Spec.Ports, r)
		}
		wantEqual(t, "ports[0].protocol", s.Spec.Ports[0].Protocol, corev1.ProtocolTCP)
		wantEqual(t, "ports[0].targetPort", s.Spec.Ports[0].TargetPort.String(), "80")
		wantContains(t, r, r.stdout, "type: ClusterIP", "sessionAffinity: None")

		r = k.run(t, "get", "secret", "web-secret", "-o", "yaml")
		var sec corev1.Secret
		if err := yaml.Unmarshal([]byte(r.stdout), &sec); err != nil {
			t.Fatalf("decode: %v\n%s", err, r)
		}
		wantEqual(t, "secret type", sec.Type, corev1.SecretTypeOpaque)
		wantEqual(t, "secret data.password", string(sec.Data["password"]), "s3cr3t")
		wantEqual(t, "configmap data.greeting",
			k.jsonpath(t, "{.data.greeting}", "configmap", "web-config"), "hello")
	})

	// Three pods, made the way users make one-off pods.
	if !t.Run("run", func(t *testing.T) {
		for _, p := range []struct{ name, labels string }{
			{"demo-1", "app=demo,tier=a"},
			{"demo-2", "app=demo,tier=b"},
			{"other", "app=other"},
		} {
			r := k.run(t, "run", p.name, "--image=busybox:1.36", "--labels="+p.labels, "--", "sleep", "3600")
			wantLines(t, r, "pod/"+p.name+" created")
		}
	}) {
		return
	}

	t.Run("get -o json", func(t *testing.T) {
		r := k.run(t, "get", "pods", "-o", "json")
		var list struct {
			APIVersion, Kind string
			Items            []corev1.Pod
		}
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatalf("decode: %v\n%s", err, r)
		}
		wantEqual(t, "kind", list.Kind, "List")
		var names []string
		for _, p := range list.Items {
			names = append(names, p.Name)
			wantEqual(t, p.Name+" namespace", p.Namespace, ns)
			wantEqual(t, p.Name+" phase", p.Status.Phase, corev1.PodPending)
			wantEqual(t, p.Name+" nodeName", p.Spec.NodeName, "")
			wantEqual(t, p.Name+" uid set", p.UID != "", true)
			wantEqual(t, p.Name+" resourceVersion set", p.ResourceVersion != "", true)
			wantEqual(t, p.Name+" creationTimestamp set", !p.CreationTimestamp.IsZero(), true)
			wantEqual(t, p.Name+" restartPolicy", p.Spec.RestartPolicy, corev1.RestartPolicyAlways)
		}
		wantEqual(t, "names", strings.Join(names, " "), "demo-1 demo-2 other")
	})

	t.Run("get -o wide", func(t *testing.T) {
		r := k.run(t, "get", "pods", "-o", "wide")
		lines := r.lines()
		if len(lines) != 4 {
			t.Fatalf("want a header and 3 pods\n%s", r)
		}
		header := strings.Fields(lines[0])
		ip, node := slices.Index(header, "IP"), slices.Index(header, "NODE")
		if ip < 0 || node < 0 || slices.Index(header, "STATUS") < 0 {
			t.Fatalf("header %q lacks STATUS, IP or NODE\n%s", lines[0], r)
		}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) <= node {
				t.Errorf("row %q: too few columns\n%s", l, r)
				continue
			}
			wantEqual(t, f[0]+" STATUS", f[slices.Index(header, "STATUS")], "Pending")
			wantEqual(t, f[0]+" IP", f[ip], "<none>")
			wantEqual(t, f[0]+" NODE", f[node], "<none>")
		}
	})

	t.Run("get -o name", func(t *testing.T) {
		wantLines(t, k.run(t, "get", "pods", "-o", "name"), "pod/demo-1", "pod/demo-2", "pod/other")
		wantLines(t, k.run(t, "get", "deploy,svc,cm,secret", "-o", "name"),
			"deployment.apps/web", "service/web", "configmap/web-config", "secret/web-secret")
	})

	t.Run("get -o jsonpath", func(t *testing.T) {
		r := k.run(t, "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\n"}{end}`)
		wantLines(t, r, "demo-1=Pending", "demo-2=Pending", "other=Pending")
		wantEqual(t, "image", k.jsonpath(t, "{.spec.template.spec.containers[0].image}", "deploy", "web"), "nginx:1.27")
	})

	t.Run("get -l", func(t *testing.T) {
		wantLines(t, k.run(t, "get", "pods", "-l", "app=demo", "-o", "name"), "pod/demo-1", "pod/demo-2")
		wantLines(t, k.run(t, "get", "pods", "-l", "app!=demo", "-o", "name"), "pod/other")
		wantLines(t, k.run(t, "get", "pods", "-l", "tier in (b),app", "-o", "name"), "pod/demo-2")
		wantLines(t, k.run(t, "get", "pods", "-l", "!tier", "-o", "name"), "pod/other")
		r := k.run(t, "get", "pods", "-l", "app=none")
		wantLines(t, r)
		wantContains(t, r, r.stderr, "No resources found in "+ns+" namespace.")
	})

	t.Run("get --field-selector", func(t *testing.T) {
		wantLines(t, k.run(t, "get", "pods", "--field-selector", "metadata.name=demo-2", "-o", "name"), "pod/demo-2")
		wantLines(t, k.run(t, "get", "pods", "--field-selector", "status.phase=Pending,metadata.name!=demo-1", "-o", "name"),
			"pod/demo-2", "pod/other")
		wantLines(t, k.run(t, "get", "pods", "--field-selector", "spec.nodeName=", "-o", "name"),
			"pod/demo-1", "pod/demo-2", "pod/other")
		r := k.run(t, "get", "pods", "--field-selector", "status.phase=Running")
		wantLines(t, r)
		wantContains(t, r, r.stderr, "No resources found in "+ns+" namespace.")
		r = k.fail(t, "get", "pods", "--field-selector", "spec.bogus=x")
		wantContains(t, r, r.stderr, "field label not supported: spec.bogus")
	})

	t.Run("get -A", func(t *testing.T) {
		r := k.run(t, "get", "pods", "-A")
		lines := r.lines()
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAMESPACE ") {
			t.Fatalf("want a header starting with NAMESPACE and 3 pods\n%s", r)
		}
		for _, l := range lines[1:] {
			wantEqual(t, "NAMESPACE of "+l, strings.Fields(l)[0], ns)
		}
		r = k.run(t, "get", "namespaces")
		wantMatch(t, r, r.stdout, `(?m)^default\s+Active\s`, `(?m)^kube-system\s+Active\s`, `(?m)^`+ns+`\s+Active\s`)
	})

	t.Run("get --chunk-size", func(t *testing.T) {
		// -v=6 logs each request: the list must come in pages of 2.
		r := k.run(t, "get", "pods", "--chunk-size=2", "-v=6")
		lines := r.lines()
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME ") {
			t.Fatalf("want one header and 3 pods\n%s", r)
		}
		for i, name := range []string{"demo-1", "demo-2", "other"} {
			wantEqual(t, "row "+strconv.Itoa(i+1), strings.Fields(lines[i+1])[0], name)
		}
		wantMatch(t, r, r.stderr, `/pods\?limit=2\b`, `/pods\?continue=[^&\s"]+&limit=2\b`)
	})

	t.Run("get -w", func(t *testing.T) {
		w := k.start(t, "get", "pods", "-w")
		w.waitOutput(t, waitTimeout, "the initial list", false, func(s string) bool {
			return strings.Contains(s, "\nother ")
		})
		wantLines(t, k.run(t, "run", "watched", "--image=busybox:1.36", "--labels=app=watched"), "pod/watched created")
		w.waitOutput(t, waitTimeout, "the new pod", false, func(s string) bool {
			return regexp.MustCompile(`(?m)^watched\s+0/1\s+Pending\s`).MatchString(s)
		})
	})

	t.Run("describe pod", func(t *testing.T) {
		r := k.run(t, "describe", "pod", "demo-1")
		wantMatch(t, r, r.stdout,
			`(?m)^Name:\s+demo-1$`,
			`(?m)^Namespace:\s+`+ns+`$`,
			`(?m)^Node:\s+<none>$`,
			`(?m)^Labels:\s+app=demo$`,
			`(?m)^\s+tier=a$`,
			`(?m)^Status:\s+Pending$`,
			`(?m)^Containers:$`,
			`(?m)^  demo-1:$`,
			`(?m)^\s+Image:\s+busybox:1\.36$`,
			`(?m)^\s+Args:\n\s+sleep\n\s+3600$`,
			`(?m)^QoS Class:\s+BestEffort$`,
			`(?m)^Events:\s+<none>$`)
	})

	t.Run("label", func(t *testing.T) {
		wantLines(t, k.run(t, "label", "pod", "demo-1", "color=blue"), "pod/demo-1 labeled")
		wantLines(t, k.run(t, "get", "pods", "-l", "color=blue", "-o", "name"), "pod/demo-1")
		r := k.fail(t, "label", "pod", "demo-1", "color=red")
		wantContains(t, r, r.stderr, "'color' already has a value (blue), and --overwrite is false")
		wantLines(t, k.run(t, "label", "pod", "demo-1", "color=red", "--overwrite"), "pod/demo-1 labeled")
		wantEqual(t, "label color", k.jsonpath(t, "{.metadata.labels.color}", "pod", "demo-1"), "red")
		wantLines(t, k.run(t, "label", "pod", "demo-1", "color-"), "pod/demo-1 unlabeled")
		wantEqual(t, "labels", k.jsonpath(t, "{.metadata.labels}", "pod", "demo-1"), `{"app":"demo","tier":"a"}`)
		wantLines(t, k.run(t, "label", "pods", "-l", "app=demo", "team=edge"), "pod/demo-1 labeled", "pod/demo-2 labeled")
	})

	t.Run("annotate", func(t *testing.T) {
		// kubectl 1.27 prints "annotate", later ones "annotated"
		// (kubernetes/kubectl#1462).
		verb := "annotated"
		if k.version == "1.27" {
			verb = "annotate"
		}
		wantLines(t, k.run(t, "annotate", "pod", "demo-1", "owner=e2e"), "pod/demo-1 "+verb)
		wantEqual(t, "annotation", k.jsonpath(t, "{.metadata.annotations.owner}", "pod", "demo-1"), "e2e")
		r := k.fail(t, "annotate", "pod", "demo-1", "owner=other")
		wantContains(t, r, r.stderr, "'owner' already has a value (e2e)")
		wantLines(t, k.run(t, "annotate", "pod", "demo-1", "owner-"), "pod/demo-1 "+verb)
		wantEqual(t, "annotations", k.jsonpath(t, "{.metadata.annotations}", "pod", "demo-1"), "")
	})

	generation := func(t *testing.T) int {
		t.Helper()
		s := k.jsonpath(t, "{.metadata.generation}", "deploy", "web")
		g, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("generation %q: %v", s, err)
		}
		return g
	}

	t.Run("patch", func(t *testing.T) {
		g := generation(t)
		// Strategic merge, the default: containers merge by name, so
		// the port stays.
		r := k.run(t, "patch", "deploy", "web", "-p", `{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.28"}]}}}}`)
		wantLines(t, r, "deployment.apps/web patched")
		wantEqual(t, "containers after strategic patch",
			k.jsonpath(t, `{range .spec.template.spec.containers[*]}{.name} {.image} {.ports[0].containerPort}{end}`, "deploy", "web"),
			"web nginx:1.28 80")
		wantEqual(t, "generation after a spec change", generation(t), g+1)

		// JSON merge patch: null deletes a key; metadata only, so the
		// generation stays.
		r = k.run(t, "patch", "deploy", "web", "--type=merge", "-p", `{"metadata":{"labels":{"app":null,"tier":"frontend"}}}`)
		wantLines(t, r, "deployment.apps/web patched")
		wantEqual(t, "labels after merge patch", k.jsonpath(t, "{.metadata.labels}", "deploy", "web"), `{"tier":"frontend"}`)
		wantEqual(t, "generation after a metadata change", generation(t), g+1)

		// JSON patch (RFC 6902).
		r = k.run(t, "patch", "deploy", "web", "--type=json", "-p",
			`[{"op":"test","path":"/spec/template/spec/containers/0/name","value":"web"},`+
				`{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"nginx:1.29"},`+
				`{"op":"add","path":"/metadata/labels/patched","value":"json"}]`)
		wantLines(t, r, "deployment.apps/web patched")
		wantEqual(t, "image after json patch", k.jsonpath(t, "{.spec.template.spec.containers[0].image}", "deploy", "web"), "nginx:1.29")
		wantEqual(t, "label after json patch", k.jsonpath(t, "{.metadata.labels.patched}", "deploy", "web"), "json")
		wantEqual(t, "generation after json patch", generation(t), g+2)
	})

	t.Run("patch no change", func(t *testing.T) {
		// A patch that changes nothing writes nothing: upstream keeps the
		// resourceVersion and kubectl says so.
		rv := k.jsonpath(t, "{.metadata.resourceVersion}", "deploy", "web")
		r := k.run(t, "patch", "deploy", "web", "--type=merge", "-p", `{"metadata":{"labels":{"tier":"frontend"}}}`)
		wantLines(t, r, "deployment.apps/web patched (no change)")
		wantEqual(t, "resourceVersion after a no-op patch", k.jsonpath(t, "{.metadata.resourceVersion}", "deploy", "web"), rv)
	})

	t.Run("patch bad input", func(t *testing.T) {
		// A JSON patch missing its brackets: upstream answers 400 with
		// the decode error, and nothing changes.
		rv := k.jsonpath(t, "{.metadata.resourceVersion}", "deploy", "web")
		r := k.fail(t, "patch", "deploy", "web", "--type=json", "-p", `{"op":"replace","path":"/spec/replicas","value":3}`)
		wantMatch(t, r, r.stderr, `^Error from server \(BadRequest\): .*cannot unmarshal object into Go value of type jsonpatch\.Patch`)
		wantEqual(t, "resourceVersion after a rejected patch", k.jsonpath(t, "{.metadata.resourceVersion}", "deploy", "web"), rv)
	})

	t.Run("scale", func(t *testing.T) {
		g := generation(t)
		wantLines(t, k.run(t, "scale", "deploy", "web", "--replicas=4"), "deployment.apps/web scaled")
		wantEqual(t, "spec.replicas", k.jsonpath(t, "{.spec.replicas}", "deploy", "web"), "4")
		wantEqual(t, "generation after scale", generation(t), g+1)
		r := k.fail(t, "scale", "deploy", "web", "--current-replicas=3", "--replicas=5")
		wantContains(t, r, r.stderr, "Expected replicas to be 3, was 4")
		wantEqual(t, "spec.replicas after a failed precondition", k.jsonpath(t, "{.spec.replicas}", "deploy", "web"), "4")
	})

	t.Run("delete", func(t *testing.T) {
		wantLines(t, k.run(t, "delete", "pod", "other"), `pod "other" deleted`)
		r := k.fail(t, "get", "pod", "other")
		wantContains(t, r, r.stderr, `Error from server (NotFound): pods "other" not found`)

		// --wait: the finalizer holds the ConfigMap until another
		// command removes it; delete returns only then.
		wantLines(t, k.run(t, "apply", "-f", "testdata/held.yaml"), "configmap/held created")
		d := k.start(t, "delete", "configmap", "held", "--wait=true", "--timeout=60s", "-v=6")
		// -v=6 logs the DELETE, then the watch that waits for the end.
		d.waitOutput(t, waitTimeout, "the watch after the DELETE", true, func(s string) bool {
			i := strings.Index(s, "DELETE")
			return i >= 0 && strings.Contains(s[i:], "watch=true")
		})
		if !d.running() {
			t.Fatalf("delete --wait returned while a finalizer holds the object\n%s", d.describe())
		}
		r = k.run(t, "get", "configmap", "held", "-o", "jsonpath={.metadata.deletionTimestamp} {.metadata.finalizers}")
		wantMatch(t, r, r.stdout, `^\d{4}-\d\d-\d\dT\S+ \["e2e.outpost.dev/hold"\]$`)
		wantLines(t, k.run(t, "patch", "configmap", "held", "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`),
			"configmap/held patched")
		if err := d.wait(t, waitTimeout); err != nil {
			t.Fatalf("delete --wait: %v\n%s", err, d.describe())
		}
		if got := strings.TrimSpace(d.stdout.String()); got != `configmap "held" deleted` {
			t.Errorf("delete --wait printed %q, want %q\n%s", got, `configmap "held" deleted`, d.describe())
		}
		r = k.fail(t, "get", "configmap", "held")
		wantContains(t, r, r.stderr, `Error from server (NotFound): configmaps "held" not found`)
	})

	t.Run("wait --for=delete", func(t *testing.T) {
		w := k.start(t, "wait", "--for=delete", "pod/watched", "--timeout=60s", "-v=6")
		// Delete only once kubectl wait watches, so the deletion is what
		// it sees.
		w.waitOutput(t, waitTimeout, "the watch", true, func(s string) bool { return strings.Contains(s, "watch=true") })
		wantLines(t, k.run(t, "delete", "pod", "watched", "--wait=false"), `pod "watched" deleted`)
		if err := w.wait(t, waitTimeout); err != nil {
			t.Fatalf("wait --for=delete: %v\n%s", err, w.describe())
		}
		if got := strings.TrimSpace(w.stdout.String()); got != "pod/watched condition met" {
			t.Errorf("wait printed %q, want %q\n%s", got, "pod/watched condition met", w.describe())
		}
	})

	t.Run("explain", func(t *testing.T) {
		r := k.run(t, "explain", "pod.spec.containers")
		wantMatch(t, r, r.stdout,
			`(?m)^KIND:\s+Pod$`,
			`(?m)^VERSION:\s+v1$`,
			`(?m)^FIELD:\s+containers <\[\]Container>$`,
			`(?m)^DESCRIPTION:$`,
			`(?m)^FIELDS:$`,
			`(?m)^\s+image\s+<string>$`,
			`(?m)^\s+name\s+<string> -required-$`,
			`(?m)^\s+ports\s+<\[\]ContainerPort>$`)
	})

	t.Run("bad input", func(t *testing.T) {
		r := k.fail(t, "apply", "-f", "testdata/pod-noimage.yaml")
		wantContains(t, r, r.stderr, `The Pod "noimage" is invalid: spec.containers[0].image: Required value`)
		r = k.fail(t, "get", "pod", "noimage")
		wantContains(t, r, r.stderr, `pods "noimage" not found`)

		r = k.fail(t, "apply", "-f", "testdata/malformed.yaml")
		wantMatch(t, r, r.stderr, `^error: error parsing testdata/malformed\.yaml: error converting YAML to JSON: yaml: line \d+: `)

		// kubectl asks for strict field validation: a typo is an error,
		// not a silently dropped field.
		r = k.fail(t, "apply", "-f", "testdata/unknown-field.yaml")
		wantMatch(t, r, r.stderr, `^Error from server \(BadRequest\): error when creating "testdata/unknown-field\.yaml": .*strict decoding error: unknown field "spec\.replica"`)
		r = k.fail(t, "get", "deploy", "typo")
		wantContains(t, r, r.stderr, `deployments.apps "typo" not found`)

		r = k.fail(t, "create", "namespace", ns)
		wantContains(t, r, r.stderr, fmt.Sprintf(`Error from server (AlreadyExists): namespaces %q already exists`, ns))
	})

	t.Run("apply --server-side", func(t *testing.T) { testServerSideApply(t, k) })

	t.Run("delete -f", func(t *testing.T) {
		r := k.run(t, "delete", "-f", "testdata/app.yaml")
		wantLines(t, r,
			`deployment.apps "web" deleted`,
			`service "web" deleted`,
			`configmap "web-config" deleted`,
			`secret "web-secret" deleted`)
		r = k.run(t, "get", "deploy,svc,secret")
		wantLines(t, r)
		wantContains(t, r, r.stderr, "No resources found in "+ns+" namespace.")
	})
}

// testServerSideApply applies server-side as users do: creating, a
// conflict with another manager and --force-conflicts, taking over an
// object made by client-side apply, and reading managedFields back.
func testServerSideApply(t *testing.T, k *kubectl) {
	cm := func(data string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n" + data
	}
	apply := func(manifest string, args ...string) result {
		t.Helper()
		r := k.execInput(t, manifest, append([]string{"apply", "--server-side", "-f", "-"}, args...)...)
		if r.err != nil {
			t.Fatalf("kubectl failed\n%s", r)
		}
		return r
	}
	// managers returns "manager/operation" of each managedFields entry of
	// the object args name, mapped to the fields it owns.
	managers := func(args ...string) map[string]string {
		t.Helper()
		r := k.run(t, append(append([]string{"get"}, args...), "-o", "yaml", "--show-managed-fields")...)
		var obj metav1.PartialObjectMetadata
		if err := yaml.Unmarshal([]byte(r.stdout), &obj); err != nil {
			t.Fatalf("decode: %v\n%s", err, r)
		}
		out := map[string]string{}
		for _, e := range obj.ManagedFields {
			if e.Time == nil || e.FieldsV1 == nil {
				t.Errorf("managedFields entry %+v lacks its time or fields\n%s", e, r)
				continue
			}
			out[e.Manager+"/"+string(e.Operation)] = string(e.FieldsV1.Raw)
		}
		return out
	}

	wantLines(t, apply(cm("  a: \"1\"\n  b: \"2\"\n")), "configmap/ssa serverside-applied")
	wantEqual(t, "data.a", k.jsonpath(t, "{.data.a}", "configmap", "ssa"), "1")
	if m := managers("configmap", "ssa"); len(m) != 1 || m["kubectl/Apply"] != `{"f:data":{"f:a":{},"f:b":{}}}` {
		t.Errorf("managedFields after the first apply = %v, want kubectl's apply of a and b", m)
	}
	// Another manager's value for a conflicts, naming kubectl and the field.
	r := k.execInput(t, cm("  a: \"other\"\n"), "apply", "--server-side", "--field-manager=other", "-f", "-")
	if r.err == nil {
		t.Fatalf("conflicting apply succeeded\n%s", r)
	}
	wantContains(t, r, r.stderr, `Apply failed with 1 conflict: conflict with "kubectl": .data.a`, "--force-conflicts")
	wantEqual(t, "data.a after a conflict", k.jsonpath(t, "{.data.a}", "configmap", "ssa"), "1")
	wantLines(t, apply(cm("  a: \"other\"\n"), "--field-manager=other", "--force-conflicts"), "configmap/ssa serverside-applied")
	wantEqual(t, "data.a after --force-conflicts", k.jsonpath(t, "{.data.a}", "configmap", "ssa"), "other")
	if m := managers("configmap", "ssa"); m["kubectl/Apply"] != `{"f:data":{"f:b":{}}}` || m["other/Apply"] != `{"f:data":{"f:a":{}}}` {
		t.Errorf("managedFields after --force-conflicts = %v, want kubectl's b and other's a", m)
	}
	r = k.run(t, "get", "configmap", "ssa", "-o", "yaml", "--show-managed-fields")
	wantContains(t, r, r.stdout, "managedFields:", "manager: other", "operation: Apply", "fieldsType: FieldsV1")
	if r = k.run(t, "get", "configmap", "ssa", "-o", "yaml"); strings.Contains(r.stdout, "managedFields") {
		t.Errorf("get -o yaml shows managedFields without --show-managed-fields\n%s", r)
	}

	// From client-side to server-side apply: kubectl apply made it, and
	// kubectl apply --server-side of a changed manifest takes it over
	// without conflicts.
	deploy := func(image string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: migrated\n  labels: {app: migrated}\nspec:\n  replicas: 1\n" +
			"  selector: {matchLabels: {app: migrated}}\n  template:\n    metadata: {labels: {app: migrated}}\n" +
			"    spec:\n      containers:\n      - name: main\n        image: " + image + "\n"
	}
	r = k.execInput(t, deploy("busybox:1.36"), "apply", "-f", "-")
	if r.err != nil {
		t.Fatalf("kubectl failed\n%s", r)
	}
	wantLines(t, r, "deployment.apps/migrated created")
	if m := managers("deploy", "migrated"); !strings.Contains(m["kubectl-client-side-apply/Update"], `"f:image"`) {
		t.Errorf("managedFields after client-side apply = %v, want kubectl-client-side-apply's image", m)
	}
	wantLines(t, apply(deploy("busybox:1.37")), "deployment.apps/migrated serverside-applied")
	wantEqual(t, "image after the upgrade", k.jsonpath(t, "{.spec.template.spec.containers[0].image}", "deploy", "migrated"), "busybox:1.37")
	m := managers("deploy", "migrated")
	if !strings.Contains(m["kubectl/Apply"], `"f:image"`) || !strings.Contains(m["kubectl/Apply"], `"k:{\"name\":\"main\"}"`) {
		t.Errorf("managedFields after the upgrade = %v, want kubectl's apply of the main container's image", m)
	}
	if strings.Contains(m["kubectl-client-side-apply/Update"], `"f:image"`) {
		t.Errorf("managedFields after the upgrade = %v: kubectl-client-side-apply still owns the image", m)
	}
	k.run(t, "delete", "configmap/ssa", "deploy/migrated")
}

func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
