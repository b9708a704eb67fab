package chart

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"kollect.dev/kollect/pkg/localcluster"
)

// runHelm runs the pinned helm against the test cluster as admin.
func runHelm(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, helm, append(args, "--kubeconfig", env.Cluster.AdminKubeconfig())...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Keep helm's cache and config out of $HOME.
	dir := filepath.Join(env.Cluster.Dir(), "helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir+"/cache", "HELM_CONFIG_HOME="+dir+"/config", "HELM_DATA_HOME="+dir+"/data")
	err := cmd.Run()
	return out.String(), err
}

// variants are value sets a platform team would install with; each must
// lint, render and be accepted by kube-apiserver.
var variants = []struct {
	name string
	sets []string
}{
	{"defaults", nil},
	{"plain manifests", []string{"-f", "hack/manifests-values.yaml"}},
	{"embedded etcd", []string{"--set", "etcd.mode=embedded", "--set", "replicas=1", "--set", "etcd.embedded.storageClassName=fast"}},
	{"external etcd", []string{"--set", "etcd.mode=external", "--set", "etcd.external.servers={https://etcd-a:2379,https://etcd-b:2379}", "--set", "etcd.external.clientSecret=my-etcd-client"}},
	{"cert-manager", []string{"--set", "tls.mode=certManager"}},
	{"monitoring", []string{"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true",
		"--set", "monitoring.grafanaDashboard.enabled=true",
		"--set", "monitoring.serviceMonitor.prometheusServiceAccount.namespace=monitoring", "--set", "monitoring.serviceMonitor.prometheusServiceAccount.name=prometheus"}},
	{"tenant mode, private sinks, limits", []string{"--set", "tenantMode=true", "--set", "allowPrivateSinkEndpoints=true",
		"--set", "memoryLimitRatio=0.8", "--set", "resources.limits.memory=4Gi", "--set", "replicas=3",
		"--set", "image.repository=registry.example/kollect", "--set", "image.tag=v9.9.9", "--set", "extraArgs={--export-watchdog-period=1m}",
		"--set", "allowedSinkCIDRs={10.96.0.0/12,fd00:1::/64}", "--set-json", `quotaDefaults={"maxItems":1000000,"maxItemBytes":"128Ki","maxSinks":0}`,
		"--set", "requesterMaxAge=720h", "--set", "fileSinkRoot=/var/lib/kollect-files"}},
}

func valuesArgs(sets []string) []string {
	out := slices.Clone(sets)
	for i := range out {
		if i > 0 && out[i-1] == "-f" {
			out[i] = env.Path(out[i])
		}
	}
	return out
}

func render(t *testing.T, ctx context.Context, sets []string) string {
	t.Helper()
	return renderIn(t, ctx, namespace, sets)
}

func renderIn(t *testing.T, ctx context.Context, ns string, sets []string) string {
	t.Helper()
	args := append([]string{"template", release, env.Path("charts/kollect"), "--namespace", ns}, valuesArgs(sets)...)
	out, err := runHelm(ctx, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func objects(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decoding the rendered chart: %v", err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// TestLint: helm lint --strict passes with every variant.
func TestLint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, v := range variants {
		args := append([]string{"lint", "--strict", env.Path("charts/kollect"), "--namespace", namespace}, valuesArgs(v.sets)...)
		if out, err := runHelm(ctx, args...); err != nil {
			t.Errorf("%s: helm lint: %v\n%s", v.name, err, out)
		}
	}
}

// TestRenderedAcceptedByServer: what every variant renders passes
// kube-apiserver's validation and admission (server-side dry run).
func TestRenderedAcceptedByServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The optional kinds' CRDs; real ones would come with cert-manager and
	// the Prometheus Operator.
	if _, stderr, err := env.Cluster.Kubectl(ctx, "apply", "-f", env.Path("test/e2e/chart/testdata/crds.yaml")); err != nil {
		t.Fatalf("CRD stand-ins: %v\n%s", err, stderr)
	}
	if _, stderr, err := env.Cluster.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/certificates.cert-manager.io",
		"crd/issuers.cert-manager.io", "crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com"); err != nil {
		t.Fatalf("CRDs not established: %v\n%s", err, stderr)
	}
	for i, v := range variants {
		// Each variant into a namespace of its own: applied over the installed
		// release, lists such as volumes would merge with what is there.
		ns := fmt.Sprintf("chart-variant-%d", i)
		env.Kubectl(t, ctx, "create", "namespace", ns)
		manifest := renderIn(t, ctx, ns, v.sets)
		if n := len(objects(t, manifest)); n < 10 {
			t.Errorf("%s: rendered only %d objects", v.name, n)
		}
		cmd := env.Cluster.KubectlCmd(ctx, "apply", "--dry-run=server", "--server-side", "--force-conflicts", "--field-manager=chart-test", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: kubectl apply --dry-run=server: %v\n%s", v.name, err, out)
		}
	}
}

// TestRenderedVariants: each value reaches the object it is for.
func TestRenderedVariants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	find := func(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetKind() == kind && o.GetName() == name {
				return o
			}
		}
		return nil
	}
	args := func(objs []*unstructured.Unstructured) []string {
		d := find(objs, "Deployment", "kollect-apiserver")
		if d == nil {
			t.Fatal("no Deployment kollect-apiserver")
		}
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		var out []string
		for _, a := range cs[0].(map[string]any)["args"].([]any) {
			out = append(out, a.(string))
		}
		return out
	}

	// Every variant: the root filesystem is read-only, so --data-dir (git
	// clones, the embedded etcd) must be a mounted volume.
	for _, v := range variants {
		objs := objects(t, render(t, ctx, v.sets))
		if !slices.Contains(args(objs), "--data-dir=/var/lib/kollect") {
			t.Errorf("%s: no --data-dir=/var/lib/kollect in %v", v.name, args(objs))
		}
		d := find(objs, "Deployment", "kollect-apiserver")
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		mounts, _ := cs[0].(map[string]any)["volumeMounts"].([]any)
		if !slices.ContainsFunc(mounts, func(m any) bool { return m.(map[string]any)["mountPath"] == "/var/lib/kollect" }) {
			t.Errorf("%s: nothing mounted at the --data-dir /var/lib/kollect: %v", v.name, mounts)
		}
	}

	// Another namespace: everything namespaced follows it, the Lease too.
	ops := objects(t, renderIn(t, ctx, "ops", nil))
	for _, want := range []string{"--leader-election-namespace=ops", "--service-namespace=ops"} {
		if !slices.Contains(args(ops), want) {
			t.Errorf("namespace ops: args %v lack %s", args(ops), want)
		}
	}
	if r := find(ops, "Role", "kollect-apiserver-leader-election"); r == nil || r.GetNamespace() != "ops" {
		t.Errorf("namespace ops: the leader-election Role is not in ops")
	}

	def := objects(t, render(t, ctx, nil))
	if find(def, "StatefulSet", "kollect-etcd") == nil || find(def, "Secret", "kollect-serving-cert") == nil {
		t.Error("defaults: want the bundled etcd and generated certificates")
	}
	if find(def, "Namespace", namespace) != nil {
		t.Error("defaults: the chart must not render its own release namespace")
	}
	if a := args(def); !slices.Contains(a, "--memory-limit-ratio=0.9") || slices.Contains(a, "--tenant-mode") {
		t.Errorf("defaults: args %v", a)
	}
	api := find(def, "APIService", "v1alpha1.kollect.dev")
	ca, _, _ := unstructured.NestedString(api.Object, "spec", "caBundle")
	secretCA, _, _ := unstructured.NestedString(find(def, "Secret", "kollect-serving-cert").Object, "data", "ca.crt")
	if ca == "" || ca != secretCA {
		t.Error("defaults: the APIService caBundle is not the CA of the generated serving certificate")
	}

	emb := objects(t, render(t, ctx, variants[2].sets))
	if find(emb, "StatefulSet", "kollect-etcd") != nil || find(emb, "PersistentVolumeClaim", "kollect-data") == nil {
		t.Error("embedded: want no etcd StatefulSet and a kollect-data PVC")
	}
	if a := args(emb); !slices.Contains(a, "--data-dir=/var/lib/kollect") || slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--etcd-servers") }) {
		t.Errorf("embedded: args %v", a)
	}

	ext := objects(t, render(t, ctx, variants[3].sets))
	if a := args(ext); !slices.Contains(a, "--etcd-servers=https://etcd-a:2379,https://etcd-b:2379") {
		t.Errorf("external: args %v", a)
	}

	cm := objects(t, render(t, ctx, variants[4].sets))
	api = find(cm, "APIService", "v1alpha1.kollect.dev")
	if _, has, _ := unstructured.NestedString(api.Object, "spec", "caBundle"); has {
		t.Error("cert-manager: the APIService must leave caBundle to the cainjector")
	}
	if api.GetAnnotations()["cert-manager.io/inject-ca-from"] != namespace+"/kollect-serving-cert" {
		t.Errorf("cert-manager: annotations %v", api.GetAnnotations())
	}
	if find(cm, "Certificate", "kollect-etcd-server") == nil || find(cm, "Secret", "kollect-serving-cert") != nil {
		t.Error("cert-manager: want Certificates, not chart-made Secrets")
	}

	ten := objects(t, render(t, ctx, variants[6].sets))
	a := args(ten)
	for _, want := range []string{"--tenant-mode", "--allow-private-sink-endpoints", "--memory-limit-ratio=0.8", "--export-watchdog-period=1m",
		"--allowed-sink-cidrs=10.96.0.0/12,fd00:1::/64", "--default-max-items=1000000", "--default-max-item-bytes=128Ki", "--default-max-sinks=0",
		"--requester-max-age=720h", "--file-sink-root=/var/lib/kollect-files"} {
		if !slices.Contains(a, want) {
			t.Errorf("tenant variant: args %v lack %s", a, want)
		}
	}
	d := find(ten, "Deployment", "kollect-apiserver")
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	img := cs[0].(map[string]any)["image"].(string)
	if img != "registry.example/kollect:v9.9.9" {
		t.Errorf("image %q", img)
	}
	if r, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas"); fmt.Sprint(r) != "3" {
		t.Errorf("replicas %v", r)
	}
}

// TestInvalidValuesRefused: combinations that cannot work fail to render,
// naming the value.
func TestInvalidValuesRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"--set", "etcd.mode=embedded"}, "replicas: must be 1 with etcd.mode embedded"},
		{[]string{"--set", "etcd.mode=external"}, "etcd.external.servers and etcd.external.clientSecret"},
		{[]string{"--set", "etcd.mode=sqlite"}, `etcd.mode: must be one of`},
		{[]string{"--set", "tls.mode=secrets"}, "tls.caBundle: required"},
		{[]string{"--set", "replicas=0"}, "replicas: must be at least 1"},
	} {
		args := append([]string{"template", release, env.Path("charts/kollect"), "--namespace", namespace}, c.sets...)
		out, err := runHelm(ctx, args...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("helm template %v: err %v, output %q; want an error with %q", c.sets, err, out, c.want)
		}
	}
}

// TestNoWildcardRBAC: no rule of any Role or ClusterRole the chart renders,
// in any variant, uses "*".
func TestNoWildcardRBAC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	checked := 0
	for _, v := range variants {
		for _, o := range objects(t, render(t, ctx, v.sets)) {
			if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
				continue
			}
			var role rbacv1.ClusterRole // Role has the same rules field
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
			for i, r := range role.Rules {
				checked++
				for field, vals := range map[string][]string{"apiGroups": r.APIGroups, "resources": r.Resources,
					"verbs": r.Verbs, "resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs} {
					for _, val := range vals {
						if strings.Contains(val, "*") {
							t.Errorf("%s: %s %s rules[%d].%s has the wildcard %q", v.name, o.GetKind(), o.GetName(), i, field, val)
						}
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d rules", checked)
	}
}

// TestPrometheusRuleIsValid: the rules inside the rendered PrometheusRule
// pass the real promtool, so what the chart ships is what make test checks.
func TestPrometheusRuleIsValid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var spec map[string]any
	for _, o := range objects(t, render(t, ctx, variants[5].sets)) {
		if o.GetKind() == "PrometheusRule" {
			spec, _, _ = unstructured.NestedMap(o.Object, "spec")
		}
	}
	if groups, _ := spec["groups"].([]any); len(groups) == 0 {
		t.Fatalf("rendered PrometheusRule has no rule groups: %v", spec)
	}
	data, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tools, err := localcluster.BuildTools(ctx, env.Root, os.Stderr, "promtool")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(tools, "promtool"), "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the rendered PrometheusRule: %v\n%s", err, out)
	}
}

// TestInstalledServesTheAPI: after helm install, kollect-apiserver runs as
// the chart's ServiceAccount with only the chart's RBAC, and kubectl reaches
// every kollect kind through the APIService.
func TestInstalledServesTheAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := runHelm(ctx, "status", release, "--namespace", namespace); err != nil || !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("helm status: %v\n%s", err, out)
	}
	if env.KollectKubeconfig == env.Cluster.AdminKubeconfig() {
		t.Fatal("kollect-apiserver runs with the admin kubeconfig")
	}
	// The ClusterRoleBinding that grants the server its permissions is the
	// chart's (Helm's ownership annotation), not something applied by hand.
	crb, err := env.Kube(t).RbacV1().ClusterRoleBindings().Get(ctx, "kollect-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crb.Annotations["meta.helm.sh/release-name"] != release {
		t.Errorf("ClusterRoleBinding kollect-apiserver annotations %v: not installed by the chart", crb.Annotations)
	}
	env.Kubectl(t, ctx, "create", "namespace", "team-a")
	env.Kubectl(t, ctx, "-n", "team-a", "create", "deployment", "web", "--image=nginx:1.27")
	apply := env.Cluster.KubectlCmd(ctx, "-n", "team-a", "apply", "-f", "-")
	apply.Stdin = strings.NewReader(`apiVersion: kollect.dev/v1alpha1
kind: Profile
metadata: {name: deployments}
spec:
  targetGVK: {group: apps, version: v1, kind: Deployment}
  attributes:
  - name: image
    path: "{.spec.template.spec.containers[*].image}"
---
apiVersion: kollect.dev/v1alpha1
kind: Target
metadata: {name: all}
spec:
  profileRef: {name: deployments}
`)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply through the APIService: %v\n%s", err, out)
	}
	out := env.Kubectl(t, ctx, "get", "kollect", "-A")
	for _, want := range []string{"profile.kollect.dev/deployments", "target.kollect.dev/all"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get kollect -A lacks %s:\n%s", want, out)
		}
	}
	// The collector works under the chart's RBAC (its aggregated ClusterRole
	// grants watching Deployments): the Deployment becomes an item.
	deadline := time.Now().Add(time.Minute)
	for {
		items, err := env.KollectClient(t).KollectV1alpha1().InventoryItems("team-a").List(ctx, metav1.ListOptions{})
		if err == nil && len(items.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no item for the Deployment under the chart's RBAC after a minute: %v %v\n%s", err, items,
				env.Kubectl(t, ctx, "-n", "team-a", "get", "target", "all", "-o", "yaml"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestUpgradeKeepsGeneratedCerts: rendering again against the installed
// release (as helm upgrade does) reuses the certificates in the cluster,
// so an upgrade never breaks the APIService's trust in the serving cert.
func TestUpgradeKeepsGeneratedCerts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"template", release, env.Path("charts/kollect"), "--namespace", namespace, "--dry-run=server"}
	out, err := runHelm(ctx, args...)
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	for _, name := range []string{"kollect-serving-cert", "kollect-etcd-tls", "kollect-etcd-client"} {
		live, err := env.Kube(t).CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			// Which Secrets the release holds, beside those in the cluster.
			manifest, _ := runHelm(ctx, "get", "manifest", release, "--namespace", namespace)
			secrets := regexp.MustCompile(`(?m)^kind: Secret\n(?:.*\n){0,2}`).FindAllString(manifest, -1)
			t.Fatalf("%v\n%s\nthe release's Secrets:\n%s", err, env.Kubectl(t, ctx, "-n", namespace, "get", "secrets"), strings.Join(secrets, "\n"))
		}
		var rendered *unstructured.Unstructured
		for _, o := range objects(t, out) {
			if o.GetKind() == "Secret" && o.GetName() == name {
				rendered = o
			}
		}
		if rendered == nil {
			t.Fatalf("no Secret %s rendered", name)
		}
		for k, v := range live.Data {
			got, _, _ := unstructured.NestedString(rendered.Object, "data", k)
			if want := base64.StdEncoding.EncodeToString(v); got != want {
				t.Errorf("Secret %s key %s: re-rendered value differs from the installed one", name, k)
			}
		}
	}
}

// TestHelmUpgrades: `helm upgrade` of the installed release works, with the
// same values and across etcd modes, and never replaces the serving
// certificate (the APIService's caBundle is its CA) nor deletes the embedded
// etcd's data.
func TestHelmUpgrades(t *testing.T) {
	for _, e := range upgrades.errs {
		t.Error(e)
	}
	if len(upgrades.servingCert) != 4 {
		t.Fatalf("%d snapshots of kollect-serving-cert, want 4 (install and three upgrades)", len(upgrades.servingCert))
	}
	for i, data := range upgrades.servingCert[1:] {
		for k, v := range upgrades.servingCert[0] {
			if !bytes.Equal(data[k], v) {
				t.Errorf("upgrade %d replaced kollect-serving-cert's %s", i+1, k)
			}
		}
	}
	if !upgrades.dataPVCKept {
		t.Error("the PVC kollect-data of the embedded etcd was deleted by the upgrade back to the bundled etcd")
	}
}
