package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// hostileNS holds the objects of the hostile inputs.
const hostileNS = "hostile"

// TestHostile is acceptance point 7 of issue 6 and point 6 of issue 12:
// hostile inputs sent as raw HTTP through the real kube-apiserver (and, for
// forged identities, straight to kollect-apiserver) are each rejected
// cleanly — the expected 4xx status with a Status naming the field or the
// reason, never a 5xx — nothing they carry is stored, and kollect-apiserver
// keeps serving throughout: after every case a known object reads back, its
// /readyz answers and its process is the one that was running at the start.
func TestHostile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := newHostile(t, ctx)
	begin := time.Now()
	cases := h.cases()
	names := map[string]bool{}
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("two cases are named %q", c.name)
		}
		names[c.name] = true
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.req.prepare != nil {
				c.req.prepare(t, ctx)
				c.req.prepare = nil
			}
			before := h.views(t, ctx, c.unchanged)
			r := h.do(t, ctx, c.req)
			h.expect(t, c, r)
			if c.absent != "" {
				h.expectAbsent(t, ctx, c.absent)
			}
			h.expectUnchanged(t, ctx, before)
			if c.check != nil && !t.Failed() {
				c.check(t, ctx, r)
			}
			h.alive(t, ctx)
		})
	}
	t.Logf("%d cases in %s", len(cases), time.Since(begin).Round(time.Millisecond))
	// A panic recovered by the server's handlers would still have been
	// answered (with a 500, which the cases rule out); make sure none was
	// logged either.
	if log := h.kollectLogSince(t); strings.Contains(log, "panic") {
		t.Errorf("kollect-apiserver logged a panic during the hostile inputs:\n%s", log)
	}
}

// hostileCase is one hostile request and what must come of it.
type hostileCase struct {
	name string
	req  hostileRequest
	// code is the expected HTTP status; a 4xx comes with a Status of the
	// same code.
	code int
	// want are substrings of the response: field paths, reasons.
	want []string
	// absent, "resource/name" under the namespace hostileNS (or
	// "/resource/name" for a cluster kind), must not exist afterwards.
	absent string
	// unchanged are objects, named like absent, that the request must
	// leave as they were, but for their status (see unchangedView).
	unchanged []string
	// check asserts more: that what was forged was not stored.
	check func(t *testing.T, ctx context.Context, r hostileReply)
}

type hostileRequest struct {
	method string // default POST
	// path is relative to /apis/kollect.dev/v1alpha1/; "ns:" at its start
	// stands for namespaces/hostile/.
	path        string
	contentType string // default application/json
	query       string
	body        []byte
	header      map[string]string
	// client and base, when set, replace the admin client through
	// kube-apiserver.
	client *http.Client
	base   string
	// prepare runs before the request (objects it needs).
	prepare func(t *testing.T, ctx context.Context)
}

type hostileReply struct {
	code   int
	body   []byte
	status *metav1.Status
	header http.Header
}

// object decodes the reply as an object.
func (r hostileReply) object(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(r.body); err != nil {
		t.Fatalf("decoding the reply: %v\n%.500s", err, r.body)
	}
	return u
}

type hostile struct {
	admin  *http.Client // through kube-apiserver, as admin
	base   string       // kube-apiserver's /apis/kollect.dev/v1alpha1
	direct *http.Client // straight to kollect-apiserver, as admin
	pid    int
	// adminName is the admin's user name as kube-apiserver authenticates it.
	adminName string
	// forger is a ServiceAccount with the edit role in hostileNS, through
	// kube-apiserver; forgerDirect is it straight to kollect-apiserver.
	forger       *http.Client
	forgerDirect *http.Client
	forgerName   string
	logOffset    int64
}

func newHostile(t *testing.T, ctx context.Context) *hostile {
	t.Helper()
	cfg := env.Admin()
	admin, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := rest.HTTPClientFor(env.Cluster.KollectRESTConfig(env.Kollect))
	if err != nil {
		t.Fatal(err)
	}
	h := &hostile{admin: admin, direct: direct, base: strings.TrimSuffix(cfg.Host, "/") + "/apis/kollect.dev/v1alpha1/", pid: env.Kollect.Pid()}
	if st, err := os.Stat(env.Kollect.LogFile()); err == nil {
		h.logOffset = st.Size()
	}
	review, err := env.Kube(t).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.adminName = review.Status.UserInfo.Username

	env.Kubectl(t, ctx, "create", "namespace", hostileNS)
	forger := serviceAccount(t, ctx, hostileNS, "forger")
	env.Kubectl(t, ctx, "create", "rolebinding", "forger", "-n", hostileNS, "--clusterrole=edit", "--serviceaccount="+hostileNS+":forger")
	token, err := env.Cluster.ServiceAccountToken(ctx, hostileNS, "forger", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fcfg := rest.AnonymousClientConfig(cfg)
	fcfg.BearerToken = token
	if h.forger, err = rest.HTTPClientFor(fcfg); err != nil {
		t.Fatal(err)
	}
	dcfg := &rest.Config{Host: env.Kollect.URL(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: env.Cluster.KollectCAPEM()}}
	if h.forgerDirect, err = rest.HTTPClientFor(dcfg); err != nil {
		t.Fatal(err)
	}
	h.forgerName = "system:serviceaccount:" + hostileNS + ":forger"

	// The known objects: the Profile read after every case, and the
	// objects the forged updates aim at. The sink's host never resolves
	// (.invalid), so its probes and exports reach nothing.
	hostileApply(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: Profile
metadata: {name: known, namespace: %[1]s}
spec:
  targetGVK: {version: v1, kind: ConfigMap}
  attributes: [{name: data, path: "{.data}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: Target
metadata: {name: forge, namespace: %[1]s}
spec:
  profileRef: {name: known}
  labelSelector: {matchLabels: {app: hostile}}
---
apiVersion: kollect.dev/v1alpha1
kind: Inventory
metadata: {name: known, namespace: %[1]s}
spec: {}
---
apiVersion: kollect.dev/v1alpha1
kind: Scope
metadata: {name: known, namespace: %[1]s}
spec: {minExportInterval: 1m}
---
apiVersion: kollect.dev/v1alpha1
kind: EventSink
metadata: {name: known, namespace: %[1]s}
spec:
  type: webhook
  endpoint: https://hooks.hostile.invalid/known
  webhook: {signatureHeader: X-Signature, maxAttempts: 3}
---
apiVersion: kollect.dev/v1alpha1
kind: Inventory
metadata: {name: exports, namespace: %[1]s}
spec: {eventSinkRefs: [{name: known}]}
`, hostileNS))
	waitCanI(t, ctx, forger, "create", "targets", hostileNS, true)
	h.alive(t, ctx)
	return h
}

// do sends a request and reads the reply.
func (h *hostile) do(t *testing.T, ctx context.Context, req hostileRequest) hostileReply {
	t.Helper()
	if req.prepare != nil {
		req.prepare(t, ctx)
	}
	method, contentType, client, base := req.method, req.contentType, req.client, req.base
	if method == "" {
		method = http.MethodPost
	}
	if contentType == "" {
		contentType = "application/json"
	}
	if client == nil {
		client = h.admin
	}
	if base == "" {
		base = h.base
	}
	u := base + strings.Replace(req.path, "ns:", "namespaces/"+hostileNS+"/", 1)
	if req.query != "" {
		u += "?" + req.query
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hreq, err := http.NewRequestWithContext(rctx, method, u, bytes.NewReader(req.body))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", contentType)
	hreq.Header.Set("Accept", "application/json")
	for k, v := range req.header {
		hreq.Header.Set(k, v)
	}
	resp, err := client.Do(hreq)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the reply of %s %s: %v", method, u, err)
	}
	r := hostileReply{code: resp.StatusCode, body: body, header: resp.Header}
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		r.status = &st
	}
	return r
}

// expect checks the status code, the Status and the wanted substrings.
func (h *hostile) expect(t *testing.T, c hostileCase, r hostileReply) {
	t.Helper()
	if r.code >= 500 {
		t.Fatalf("HTTP %d, a server error, for a hostile input:\n%.2000s", r.code, r.body)
	}
	if r.code != c.code {
		t.Fatalf("HTTP %d, want %d:\n%.2000s", r.code, c.code, r.body)
	}
	if r.code >= 400 {
		if r.status == nil || int(r.status.Code) != r.code || r.status.Status != metav1.StatusFailure {
			t.Errorf("the %d is not a Failure Status of that code:\n%.2000s", r.code, r.body)
		} else {
			t.Logf("%d %s: %.300s", r.code, r.status.Reason, r.status.Message)
		}
	}
	for _, w := range c.want {
		if !bytes.Contains(r.body, []byte(w)) {
			t.Errorf("the reply should contain %q:\n%.2000s", w, r.body)
		}
	}
}

// objectPath is the request path of "resource/name" in hostileNS, or of
// "/resource/name" of a cluster kind.
func objectPath(object string) string {
	if strings.HasPrefix(object, "/") {
		return object[1:]
	}
	return "ns:" + object
}

// expectAbsent checks that the object a refused request named was not
// stored. One that was is deleted again, so that a cluster-wide object
// wrongly accepted (a ClusterScope) does not spoil the other tests.
func (h *hostile) expectAbsent(t *testing.T, ctx context.Context, object string) {
	t.Helper()
	path := objectPath(object)
	if r := h.do(t, ctx, hostileRequest{method: http.MethodGet, path: path}); r.code != http.StatusNotFound {
		t.Errorf("%s after the refused request: HTTP %d, want 404 (nothing stored):\n%.1000s", object, r.code, r.body)
		if r.code == http.StatusOK {
			h.do(t, ctx, hostileRequest{method: http.MethodDelete, path: path})
		}
	}
}

// unchangedView is what of an object a refused request must leave as it
// was: everything but its status, which the controllers keep writing (the
// cases on /status check what they forged with statusLacks), and the
// bookkeeping of every write.
func unchangedView(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	o := u.DeepCopy().Object
	delete(o, "status")
	unstructured.RemoveNestedField(o, "metadata", "resourceVersion")
	unstructured.RemoveNestedField(o, "metadata", "managedFields")
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// views reads the unchangedView of objects named like absent.
func (h *hostile) views(t *testing.T, ctx context.Context, objects []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, object := range objects {
		r := h.do(t, ctx, hostileRequest{method: http.MethodGet, path: objectPath(object)})
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d:\n%.1000s", object, r.code, r.body)
		}
		out[object] = unchangedView(t, r.object(t))
	}
	return out
}

// expectUnchanged checks that the objects are still as views read them
// before the request: it changed nothing of them.
func (h *hostile) expectUnchanged(t *testing.T, ctx context.Context, before map[string]string) {
	t.Helper()
	for object, view := range before {
		r := h.do(t, ctx, hostileRequest{method: http.MethodGet, path: objectPath(object)})
		if r.code != http.StatusOK {
			t.Errorf("%s after the request: HTTP %d, want it still there:\n%.1000s", object, r.code, r.body)
			continue
		}
		if now := unchangedView(t, r.object(t)); now != view {
			t.Errorf("%s changed by the refused request:\nbefore %.1000s\nafter  %.1000s", object, view, now)
		}
	}
}

// statusLacks checks that the status of object (named like absent) does not
// hold what a refused /status write carried.
func (h *hostile) statusLacks(object, forged string) func(t *testing.T, ctx context.Context, r hostileReply) {
	return func(t *testing.T, ctx context.Context, _ hostileReply) {
		r := h.do(t, ctx, hostileRequest{method: http.MethodGet, path: objectPath(object)})
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d:\n%.1000s", object, r.code, r.body)
		}
		status, err := json.Marshal(r.object(t).Object["status"])
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(status), forged) {
			t.Errorf("the status of %s holds %.100q from the refused write:\n%.2000s", object, forged, status)
		}
	}
}

// alive checks that kollect-apiserver still serves: a known object reads
// back through kube-apiserver, its own /readyz answers, and its process is
// the one that was running when the test began (no crash, no restart).
func (h *hostile) alive(t *testing.T, ctx context.Context) {
	t.Helper()
	if r := h.do(t, ctx, hostileRequest{method: http.MethodGet, path: "ns:profiles/known"}); r.code != http.StatusOK {
		t.Fatalf("GET of the known Profile: HTTP %d:\n%.1000s", r.code, r.body)
	}
	if r := h.do(t, ctx, hostileRequest{method: http.MethodGet, client: h.direct, base: env.Kollect.URL(), path: "/readyz"}); r.code != http.StatusOK || string(r.body) != "ok" {
		t.Fatalf("kollect-apiserver /readyz: HTTP %d %q", r.code, r.body)
	}
	if !env.Kollect.Running() || env.Kollect.Pid() != h.pid {
		t.Fatalf("kollect-apiserver is not the process it was (pid %d, running %v, want pid %d); exit: %v",
			env.Kollect.Pid(), env.Kollect.Running(), h.pid, env.Kollect.ExitErr())
	}
}

// kollectLogSince is what kollect-apiserver logged since the test began.
func (h *hostile) kollectLogSince(t *testing.T) string {
	t.Helper()
	f, err := os.Open(env.Kollect.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(h.logOffset, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// get reads an object of hostileNS as admin ("resource/name").
func (h *hostile) get(t *testing.T, ctx context.Context, object string) *unstructured.Unstructured {
	t.Helper()
	r := h.do(t, ctx, hostileRequest{method: http.MethodGet, path: "ns:" + object})
	if r.code != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d:\n%.1000s", object, r.code, r.body)
	}
	return r.object(t)
}

// expectServerRequester checks status.requester: the real user, not the forged one.
func expectServerRequester(t *testing.T, u *unstructured.Unstructured, want string) {
	t.Helper()
	got, _, _ := unstructured.NestedString(u.Object, "status", "requester", "username")
	groups, _, _ := unstructured.NestedStringSlice(u.Object, "status", "requester", "groups")
	if got != want {
		t.Errorf("status.requester.username %q, want %q (the forged requester must be ignored)", got, want)
	}
	for _, g := range groups {
		if g == "forged:group" {
			t.Errorf("status.requester.groups %v carries the forged group", groups)
		}
	}
}

// expectNotForged checks that no forged condition or observation of the
// cases is in the status.
func expectNotForged(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if n, _, _ := unstructured.NestedInt64(u.Object, "status", "collection", "itemCount"); n == 999 {
		t.Errorf("the forged status.collection was stored: %v", u.Object["status"])
	}
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		if m, _ := c.(map[string]any); m["reason"] == "Forged" {
			t.Errorf("a forged condition was stored: %v", m)
		}
	}
}

// hostileJSON marshals a value built by the cases.
func hostileJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

type jobj = map[string]any

func hmeta(name string) jobj { return jobj{"name": name, "namespace": hostileNS} }

func profileObj(name string, attrs ...jobj) jobj {
	if len(attrs) == 0 {
		attrs = []jobj{{"name": "data", "path": "{.data}"}}
	}
	return jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "Profile", "metadata": hmeta(name),
		"spec": jobj{"targetGVK": jobj{"version": "v1", "kind": "ConfigMap"}, "attributes": attrs}}
}

func targetObj(name string, spec jobj) jobj {
	if spec == nil {
		spec = jobj{}
	}
	if _, ok := spec["profileRef"]; !ok {
		spec["profileRef"] = jobj{"name": "known"}
	}
	return jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "Target", "metadata": hmeta(name), "spec": spec}
}

func inventoryObj(name string, spec jobj) jobj {
	return jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "Inventory", "metadata": hmeta(name), "spec": spec}
}

func scopeObj(m jobj) jobj {
	return jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "Scope", "metadata": m, "spec": jobj{}}
}

// celProfile is a Profile whose one attribute has the path p.
func celProfile(name, p string) []byte {
	return hostileJSON(profileObj(name, jobj{"name": "x", "path": p}))
}

// numbered is n distinct strings prefix0, prefix1, ...
func numbered(prefix string, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// nestedJSON is depth levels of JSON arrays or objects around a string.
func nestedJSON(depth int, object bool) string {
	if object {
		return strings.Repeat(`{"x":`, depth) + `"deep"` + strings.Repeat("}", depth)
	}
	return strings.Repeat("[", depth) + `"deep"` + strings.Repeat("]", depth)
}

// cases is the table. Each case stands on its own; objects it creates are
// named after it.
func (h *hostile) cases() []hostileCase {
	const (
		badRequest  = http.StatusBadRequest
		forbidden   = http.StatusForbidden
		invalid     = http.StatusUnprocessableEntity
		notFound    = http.StatusNotFound
		tooLarge    = http.StatusRequestEntityTooLarge
		unsupported = http.StatusUnsupportedMediaType
		created     = http.StatusCreated
		ok          = http.StatusOK
	)
	matchLabels := jobj{}
	for i := range 10000 {
		matchLabels[fmt.Sprintf("key-%d", i)] = "v"
	}
	labels2MiB := jobj{}
	for i := range 20000 {
		labels2MiB[fmt.Sprintf("hostile.example.com/label-%05d", i)] = strings.Repeat("v", 63)
	}
	attrs := make([]jobj, 10000)
	for i := range attrs {
		attrs[i] = jobj{"name": fmt.Sprintf("a%d", i), "path": "{.metadata.name}"}
	}
	targetRefs := make([]any, 10000)
	for i := range targetRefs {
		targetRefs[i] = jobj{"name": fmt.Sprintf("t%d", i)}
	}
	ten := "[1,2,3,4,5,6,7,8,9,10]"
	forgedReady := jobj{"type": "Ready", "status": "True", "reason": "Forged", "message": "forged", "lastTransitionTime": "2020-01-01T00:00:00Z"}
	product := "cel:" + strings.Repeat(ten+".map(x, ", 8) + "'x'" + strings.Repeat(")", 8)
	forgedStatus := jobj{
		"requester":  jobj{"username": "system:admin", "groups": []any{"system:masters", "forged:group"}},
		"collection": jobj{"observedGeneration": 1, "itemCount": 999, "reason": "Forged"},
		"conditions": []any{forgedReady},
	}
	// The server derives conditions on every write; a /status write reports
	// observations (status.collection), never the requester or conditions.
	forgedStatusWrite := jobj{"requester": forgedStatus["requester"], "conditions": []any{forgedReady}}

	return slices.Concat([]hostileCase{
		// Sizes.
		{
			name: "3 MiB spec is over the request limit",
			req:  hostileRequest{path: "ns:profiles", body: celProfile("oversized", "{.a"+strings.Repeat(".b", 3<<19)+"}")},
			code: tooLarge, want: []string{"RequestEntityTooLarge"}, absent: "profiles/oversized",
		},
		{
			name: "2 MiB of labels is over the storage limit",
			req:  hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(jobj{"name": "labels-2mib", "namespace": hostileNS, "labels": labels2MiB}))},
			code: tooLarge, want: []string{"RequestEntityTooLarge"}, absent: "scopes/labels-2mib",
		},
		{
			name: "annotations over 256 KiB",
			req: hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(jobj{"name": "annotations-300kib", "namespace": hostileNS,
				"annotations": jobj{"hostile": strings.Repeat("a", 300<<10)}}))},
			code: invalid, want: []string{"metadata.annotations", "Too long"}, absent: "scopes/annotations-300kib",
		},
		{
			name: "name of 300 characters",
			req:  hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(hmeta(strings.Repeat("n", 300))))},
			code: invalid, want: []string{"metadata.name", "must be no more than 253 characters"},
		},

		// Nesting.
		{
			name: "1,000-level nested JSON in an unknown field, strict field validation",
			req: hostileRequest{path: "ns:profiles", query: "fieldValidation=Strict",
				body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Profile","metadata":{"name":"nested-unknown"},"spec":{"targetGVK":{"version":"v1","kind":"ConfigMap"},"attributes":[{"name":"a","path":"{.a}"}],"hostile":` + nestedJSON(1000, true) + `}}`)},
			code: badRequest, want: []string{`unknown field \"spec.hostile\"`}, absent: "profiles/nested-unknown",
		},
		{
			name: "1,000-level nested JSON in a typed field",
			req: hostileRequest{path: "ns:targets",
				body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Target","metadata":{"name":"nested-typed"},"spec":{"profileRef":{"name":"known"},"names":` + nestedJSON(1000, false) + `}}`)},
			code: badRequest, want: []string{"BadRequest"}, absent: "targets/nested-typed",
		},
		{
			name: "100,000-level nested JSON",
			req: hostileRequest{path: "ns:targets",
				body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Target","metadata":{"name":"nested-deep"},"spec":` + nestedJSON(100000, true) + `}`)},
			code: badRequest, want: []string{"BadRequest"}, absent: "targets/nested-deep",
		},

		// Lists of 10,000.
		{
			name: "10,000 values in a matchExpressions entry",
			req: hostileRequest{path: "ns:targets", body: hostileJSON(targetObj("selector-values", jobj{"labelSelector": jobj{"matchExpressions": []any{
				jobj{"key": "app", "operator": "In", "values": numbered("v", 10000)}}}}))},
			code: invalid, want: []string{"spec.labelSelector.matchExpressions[0].values", "Too many"}, absent: "targets/selector-values",
		},
		{
			name: "10,000 matchLabels",
			req:  hostileRequest{path: "ns:targets", body: hostileJSON(targetObj("selector-labels", jobj{"labelSelector": jobj{"matchLabels": matchLabels}}))},
			code: invalid, want: []string{"spec.labelSelector.matchLabels", "Too many"}, absent: "targets/selector-labels",
		},
		{
			name: "10,000 matchExpressions in an Inventory's targetSelector",
			req: hostileRequest{path: "ns:inventories", body: hostileJSON(inventoryObj("selector-expressions", jobj{"targetSelector": jobj{"matchExpressions": func() []any {
				out := make([]any, 10000)
				for i := range out {
					out[i] = jobj{"key": fmt.Sprintf("k%d", i), "operator": "Exists"}
				}
				return out
			}()}}))},
			code: invalid, want: []string{"spec.targetSelector.matchExpressions", "Too many"}, absent: "inventories/selector-expressions",
		},
		{
			name: "10,000 attributes",
			req:  hostileRequest{path: "ns:profiles", body: hostileJSON(profileObj("attributes-10000", attrs...))},
			code: invalid, want: []string{"spec.attributes", "Too many"}, absent: "profiles/attributes-10000",
		},
		{
			name: "10,000 names",
			req:  hostileRequest{path: "ns:targets", body: hostileJSON(targetObj("names-10000", jobj{"names": numbered("n", 10000)}))},
			code: invalid, want: []string{"spec.names", "Too many"}, absent: "targets/names-10000",
		},
		{
			name: "10,000 targetRefs on a ClusterInventory",
			req: hostileRequest{path: "clusterinventories", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "ClusterInventory",
				"metadata": jobj{"name": "hostile-target-refs"}, "spec": jobj{"sinkNamespace": hostileNS, "targetRefs": targetRefs}})},
			code: invalid, want: []string{"spec.targetRefs", "Too many"}, absent: "/clusterinventories/hostile-target-refs",
		},
		{
			name: "10,000 includeNamespaces on a ClusterTarget",
			req: hostileRequest{path: "clustertargets", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "ClusterTarget",
				"metadata": jobj{"name": "hostile-namespaces"}, "spec": jobj{"profileRef": jobj{"namespace": hostileNS, "name": "known"}, "includeNamespaces": numbered("ns-", 10000)}})},
			code: invalid, want: []string{"spec.includeNamespaces", "Too many"}, absent: "/clustertargets/hostile-namespaces",
		},

		// Expressions.
		{
			name: "CEL looping over the object in nested comprehensions",
			req:  hostileRequest{path: "ns:profiles", body: celProfile("cel-loops", "cel:object.data.all(k, object.data.all(j, object.data.exists(i, k + j == i)))")},
			code: invalid, want: []string{"spec.attributes[0].path", "too expensive"}, absent: "profiles/cel-loops",
		},
		{
			name: "CEL allocating a product of lists (10^8 strings)",
			req:  hostileRequest{path: "ns:profiles", body: celProfile("cel-product", product)},
			code: invalid, want: []string{"spec.attributes[0].path", "too expensive"}, absent: "profiles/cel-product",
		},
		{
			name: "CEL allocating a list of 10^8 integers",
			req:  hostileRequest{path: "ns:profiles", body: celProfile("cel-range", "cel:lists.range(100000000)")},
			code: invalid, want: []string{"spec.attributes[0].path", "too expensive"}, absent: "profiles/cel-range",
		},
		{
			name: "CEL repeating a string, a function it does not have",
			req:  hostileRequest{path: "ns:profiles", body: celProfile("cel-repeat", "cel:'x'.repeat(100000000)")},
			code: invalid, want: []string{"spec.attributes[0].path", "undeclared reference to 'repeat'"}, absent: "profiles/cel-repeat",
		},
		{
			name: "CEL that does not compile",
			req:  hostileRequest{path: "ns:profiles", body: celProfile("cel-syntax", "cel:object.metadata.name +")},
			code: invalid, want: []string{"spec.attributes[0].path", "invalid CEL expression at line 1"}, absent: "profiles/cel-syntax",
		},
		{
			name: "CEL nested 500 deep",
			req:  hostileRequest{path: "ns:profiles", body: celProfile("cel-deep", "cel:"+nestedJSON(500, false))},
			code: invalid, want: []string{"spec.attributes[0].path", "invalid CEL expression: expression recursion limit exceeded"}, absent: "profiles/cel-deep",
			check: func(t *testing.T, _ context.Context, r hostileReply) {
				if bytes.Contains(r.body, []byte("line -1")) {
					t.Errorf("the error gives a position that does not exist:\n%.1000s", r.body)
				}
			},
		},
		{
			// Within the estimate at admission; the collector stops it at
			// the runtime cost limit (or its deadline on one evaluation),
			// reports it, and carries on.
			name: "CEL looping past the runtime cost limit",
			req: hostileRequest{path: "ns:targets", body: hostileJSON(targetObj("cel-runtime", jobj{"profileRef": jobj{"name": "cel-runtime"},
				"labelSelector": jobj{"matchLabels": jobj{"app": "cel-runtime"}}})),
				prepare: func(t *testing.T, ctx context.Context) {
					hostileApply(t, ctx, fmt.Sprintf(`
apiVersion: v1
kind: ConfigMap
metadata: {name: cel-runtime, namespace: %[1]s, labels: {app: cel-runtime}}
data: {a: b}
---
apiVersion: kollect.dev/v1alpha1
kind: Profile
metadata: {name: cel-runtime, namespace: %[1]s}
spec:
  targetGVK: {version: v1, kind: ConfigMap}
  attributes: [{name: loop, path: "cel:lists.range(500000).map(i, i)"}]
`, hostileNS))
				}},
			code: created,
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				client := env.KollectClient(t).KollectV1alpha1().Targets(hostileNS)
				var last *v1alpha1.CollectionObservation
				err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					tgt, err := client.Get(ctx, "cel-runtime", metav1.GetOptions{})
					if err != nil {
						return false, err
					}
					last = tgt.Status.Collection
					// Stopped by the cost limit or, on a slow machine, by the
					// collector's deadline on one evaluation first.
					return last != nil && last.FailedCount == 1 && strings.Contains(last.LastError, `attribute "loop"`) &&
						(strings.Contains(last.LastError, "runtime cost limit") || strings.Contains(last.LastError, "took longer than")), nil
				})
				if err != nil {
					t.Fatalf("status.collection %+v, want one failed object, stopped by the runtime cost limit or the evaluation deadline: %v", last, err)
				}
				t.Logf("collected with %d failed: %s", last.FailedCount, last.LastError)
			},
		},
		{
			name: "JSONPath that does not parse",
			req:  hostileRequest{path: "ns:profiles", body: celProfile("jsonpath-bad", "{.data[?(@.x==}")},
			code: invalid, want: []string{"spec.attributes[0].path", "invalid JSONPath"}, absent: "profiles/jsonpath-bad",
		},

		// Encoding.
		{
			name: "invalid UTF-8 in metadata.name",
			req:  hostileRequest{path: "ns:scopes", body: []byte("{\"apiVersion\":\"kollect.dev/v1alpha1\",\"kind\":\"Scope\",\"metadata\":{\"name\":\"bad-\xff\xfe-name\"},\"spec\":{}}")},
			code: invalid, want: []string{"metadata.name", "Invalid value"},
		},
		{
			name: "invalid UTF-8 in an attribute name",
			req:  hostileRequest{path: "ns:profiles", body: []byte("{\"apiVersion\":\"kollect.dev/v1alpha1\",\"kind\":\"Profile\",\"metadata\":{\"name\":\"utf8-attribute\"},\"spec\":{\"targetGVK\":{\"version\":\"v1\",\"kind\":\"ConfigMap\"},\"attributes\":[{\"name\":\"a\xc3\x28\",\"path\":\"{.data}\"}]}}")},
			code: invalid, want: []string{"spec.attributes[0].name"}, absent: "profiles/utf8-attribute",
		},
		{
			name: "invalid UTF-8 in a label",
			req:  hostileRequest{path: "ns:scopes", body: []byte("{\"apiVersion\":\"kollect.dev/v1alpha1\",\"kind\":\"Scope\",\"metadata\":{\"name\":\"utf8-label\",\"labels\":{\"team\":\"\xed\xa0\x80\"}},\"spec\":{}}")},
			code: invalid, want: []string{"metadata.labels"}, absent: "scopes/utf8-label",
		},
		{
			name: "invalid UTF-8 in the URL",
			req:  hostileRequest{method: http.MethodDelete, path: "ns:scopes/%FF%FE"},
			code: notFound, want: []string{"NotFound"},
		},

		// Forged status, metadata and identity.
		{
			name: "forged status on create is dropped",
			req:  hostileRequest{path: "ns:targets", body: hostileJSON(func() jobj { o := targetObj("forged-status", nil); o["status"] = forgedStatus; return o }())},
			code: created,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				for _, u := range []*unstructured.Unstructured{r.object(t), h.get(t, ctx, "targets/forged-status")} {
					expectServerRequester(t, u, h.adminName)
					expectNotForged(t, u)
				}
			},
		},
		{
			name: "forged sinkExports on create are dropped",
			req: hostileRequest{path: "ns:inventories", body: hostileJSON(func() jobj {
				o := inventoryObj("forged-exports", jobj{})
				o["status"] = jobj{"sinkExports": []any{jobj{"family": "Snapshot", "name": "elsewhere", "outcome": "Exported", "itemCount": 999}},
					"itemCount": 999, "sinksSynced": "1/1", "requester": jobj{"username": "system:admin"}}
				return o
			}())},
			code: created,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				u := r.object(t)
				expectServerRequester(t, u, h.adminName)
				exports, _, _ := unstructured.NestedSlice(u.Object, "status", "sinkExports")
				n, _, _ := unstructured.NestedInt64(u.Object, "status", "itemCount")
				if len(exports) != 0 || n == 999 {
					t.Errorf("the forged export status was stored: %v", u.Object["status"])
				}
			},
		},
		{
			name: "forged requester through a /status update is ignored",
			req: hostileRequest{method: http.MethodPut, path: "ns:targets/forge/status",
				body: hostileJSON(func() jobj { o := targetObj("forge", nil); o["status"] = forgedStatusWrite; return o }())},
			code: ok,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				for _, u := range []*unstructured.Unstructured{r.object(t), h.get(t, ctx, "targets/forge")} {
					expectServerRequester(t, u, h.adminName)
					expectNotForged(t, u)
				}
			},
		},
		{
			name: "forged requester through server-side apply of /status is ignored",
			req: hostileRequest{method: http.MethodPatch, path: "ns:targets/forge/status", contentType: "application/apply-patch+yaml", query: "fieldManager=forger&force=true",
				body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "Target", "metadata": jobj{"name": "forge"}, "status": forgedStatusWrite})},
			code: ok,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				u := r.object(t)
				expectServerRequester(t, u, h.adminName)
				expectNotForged(t, u)
				for _, mf := range u.GetManagedFields() {
					if mf.Manager == "forger" && mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), "requester") {
						t.Errorf("the forger owns status.requester: %s", mf.FieldsV1.Raw)
					}
				}
			},
		},
		{
			name: "forged requester through a JSON patch of /status is ignored",
			req: hostileRequest{method: http.MethodPatch, path: "ns:targets/forge/status", contentType: "application/json-patch+json",
				body: []byte(`[{"op":"replace","path":"/status/requester","value":{"username":"system:admin","groups":["forged:group"]}}]`)},
			code: ok,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				expectServerRequester(t, r.object(t), h.adminName)
			},
		},
		{
			name: "JSON patch moving status into metadata",
			req: hostileRequest{method: http.MethodPatch, path: "ns:inventories/known", contentType: "application/json-patch+json",
				body: []byte(`[{"op":"move","from":"/status","path":"/metadata/annotations"}]`)},
			code: invalid, want: []string{"patch: Invalid value", "cannot unmarshal"},
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				for k := range h.get(t, ctx, "inventories/known").GetAnnotations() {
					if k != "kubectl.kubernetes.io/last-applied-configuration" {
						t.Errorf("annotation %q after the refused patch", k)
					}
				}
			},
		},
		{
			name: "forged requester through the aggregator's identity headers",
			req: hostileRequest{path: "ns:targets", client: h.forger,
				header: map[string]string{"X-Remote-User": "system:admin", "X-Remote-Group": "forged:group", "X-Remote-Extra-Scopes": "forged"},
				body:   hostileJSON(targetObj("forged-headers", nil))},
			code: created,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				expectServerRequester(t, r.object(t), h.forgerName)
			},
		},
		{
			name: "identity headers straight to kollect-apiserver without credentials",
			req: hostileRequest{path: "ns:targets", client: anonymousKollectClient(), base: env.Kollect.URL() + "/apis/kollect.dev/v1alpha1/",
				header: map[string]string{"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"},
				body:   hostileJSON(targetObj("forged-direct", nil))},
			code: forbidden, want: []string{"system:anonymous"}, absent: "targets/forged-direct",
		},
		{
			name: "forged uid, generation and creationTimestamp on create",
			req: hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(jobj{"name": "forged-meta", "namespace": hostileNS,
				"uid": "00000000-0000-0000-0000-000000000001", "generation": 42, "creationTimestamp": "2000-01-01T00:00:00Z"}))},
			code: created,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				u := r.object(t)
				if u.GetUID() == "00000000-0000-0000-0000-000000000001" || u.GetGeneration() != 1 || u.GetCreationTimestamp().Year() == 2000 {
					t.Errorf("forged metadata stored: uid %s, generation %d, created %s", u.GetUID(), u.GetGeneration(), u.GetCreationTimestamp())
				}
			},
		},
		{
			name: "resourceVersion on create",
			req:  hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(jobj{"name": "forged-rv", "namespace": hostileNS, "resourceVersion": "12345"}))},
			code: invalid, want: []string{"metadata.resourceVersion"}, absent: "scopes/forged-rv",
		},
		{
			name: "forged uid on update",
			req: hostileRequest{method: http.MethodPut, path: "ns:scopes/known",
				body: hostileJSON(scopeObj(jobj{"name": "known", "namespace": hostileNS, "uid": "00000000-0000-0000-0000-000000000002"}))},
			code: http.StatusConflict, want: []string{"Precondition failed: UID"},
		},

		// References to kinds that do not exist.
		{
			name: "Target for a kind of a group the cluster does not serve",
			req: hostileRequest{path: "ns:targets", body: hostileJSON(targetObj("unknown-group", jobj{"profileRef": jobj{"name": "unknown-group"}})),
				prepare: func(t *testing.T, ctx context.Context) {
					hostileApply(t, ctx, fmt.Sprintf("apiVersion: kollect.dev/v1alpha1\nkind: Profile\nmetadata: {name: unknown-group, namespace: %s}\nspec:\n  targetGVK: {group: nothere.hostile.example.com, version: v1, kind: Widget}\n  attributes: [{name: a, path: \"{.spec}\"}]\n", hostileNS))
				}},
			code: created,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				if w := r.header.Get("Warning"); !strings.Contains(w, "does not serve") {
					t.Errorf("no warning that the kind is not served: %q", w)
				}
				h.waitCollection(t, ctx, "unknown-group", "KindNotFound")
			},
		},
		{
			// The collector keeps running, drops what it collected of the
			// removed kind, and the Target reports KindNotFound.
			name: "Target whose CRD is deleted",
			req: hostileRequest{method: http.MethodGet, path: "ns:targets/removed-kind",
				prepare: func(t *testing.T, ctx context.Context) { h.removedKind(t, ctx) }},
			code: ok,
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				items := env.KollectClient(t).KollectV1alpha1().InventoryItems(hostileNS)
				var last string
				err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					tgt, err := env.KollectClient(t).KollectV1alpha1().Targets(hostileNS).Get(ctx, "removed-kind", metav1.GetOptions{})
					if err != nil {
						return false, err
					}
					list, err := items.List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelTarget + "=removed-kind"})
					if err != nil {
						return false, err
					}
					c := tgt.Status.Collection
					last = fmt.Sprintf("collection %+v, %d items", c, len(list.Items))
					return c != nil && c.ItemCount == 0 && len(list.Items) == 0, nil
				})
				if err != nil {
					t.Fatalf("after the CRD was deleted: %s: %v", last, err)
				}
				t.Logf("after the CRD was deleted: %s", last)
				h.waitCollection(t, ctx, "removed-kind", "KindNotFound")
			},
		},

		// Durations.
		{
			name: "negative interval",
			req:  hostileRequest{path: "ns:inventories", body: hostileJSON(inventoryObj("negative-interval", jobj{"exportMinInterval": "-5m"}))},
			code: invalid, want: []string{"spec.exportMinInterval", "must be non-negative"}, absent: "inventories/negative-interval",
		},
		{
			name: "interval 1e309s",
			req:  hostileRequest{path: "ns:inventories", body: hostileJSON(inventoryObj("interval-1e309", jobj{"exportMinInterval": "1e309s"}))},
			code: badRequest, want: []string{"1e309s"}, absent: "inventories/interval-1e309",
		},
		{
			name: "interval beyond int64 nanoseconds",
			req:  hostileRequest{path: "ns:scopes", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "Scope", "metadata": hmeta("interval-huge"), "spec": jobj{"minExportInterval": "9999999999h"}})},
			code: badRequest, want: []string{"9999999999h"}, absent: "scopes/interval-huge",
		},

		// Private endpoints and Secrets.
		{
			name: "git sink on the cloud metadata address",
			req: hostileRequest{path: "ns:snapshotsinks", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "SnapshotSink", "metadata": hmeta("metadata-endpoint"),
				"spec": jobj{"type": "git", "endpoint": "http://169.254.169.254/latest/meta-data", "git": jobj{"branch": "main"}}})},
			code: invalid, want: []string{"spec.endpoint", "cloud metadata", "--allow-private-sink-endpoints"}, absent: "snapshotsinks/metadata-endpoint",
		},
		{
			name: "webhook sink on localhost",
			req: hostileRequest{path: "ns:eventsinks", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "EventSink", "metadata": hmeta("localhost-endpoint"),
				"spec": jobj{"type": "webhook", "endpoint": "http://localhost:8080/hook", "webhook": jobj{"signatureHeader": "X-Signature", "maxAttempts": 3}}})},
			code: invalid, want: []string{"spec.endpoint", "loopback"}, absent: "eventsinks/localhost-endpoint",
		},
		{
			name: "postgres sink reaching 127.0.0.1 through a host parameter",
			req: hostileRequest{path: "ns:databasesinks", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "DatabaseSink", "metadata": hmeta("host-parameter"),
				"spec": jobj{"type": "postgres", "endpoint": "postgres://db.example.com:5432/inventory?host=127.0.0.1"}})},
			code: invalid, want: []string{"spec.endpoint", "loopback"}, absent: "databasesinks/host-parameter",
		},
		{
			name: "Secret collection without the opt-in",
			req: hostileRequest{path: "ns:profiles", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "Profile", "metadata": hmeta("secrets"),
				"spec": jobj{"targetGVK": jobj{"version": "v1", "kind": "Secret"}, "attributes": []any{jobj{"name": "data", "path": "{.data}"}}}})},
			code: invalid, want: []string{"metadata.annotations[kollect.dev/collect-secrets]", "explicit opt-in"}, absent: "profiles/secrets",
		},

		// Malformed JSON and wrong types.
		{
			name: "duplicate JSON keys, strict field validation",
			req: hostileRequest{path: "ns:scopes", query: "fieldValidation=Strict",
				body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"duplicate-keys","name":"other"},"spec":{}}`)},
			code: badRequest, want: []string{`duplicate field \"metadata.name\"`}, absent: "scopes/duplicate-keys",
		},
		{
			name: "unknown field, strict field validation",
			req: hostileRequest{path: "ns:scopes", query: "fieldValidation=Strict",
				body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"unknown-field"},"spec":{"maxObjects":5}}`)},
			code: badRequest, want: []string{`unknown field \"spec.maxObjects\"`}, absent: "scopes/unknown-field",
		},
		{
			name: "null where objects are required",
			req:  hostileRequest{path: "ns:profiles", body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Profile","metadata":{"name":"null-spec"},"spec":null}`)},
			code: invalid, want: []string{"spec.targetGVK.kind", "Required value"}, absent: "profiles/null-spec",
		},
		{
			name: "null metadata",
			req:  hostileRequest{path: "ns:scopes", body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":null,"spec":null}`)},
			code: invalid, want: []string{"metadata.name", "Required value"},
		},
		{
			name: "a string for an integer",
			req: hostileRequest{path: "ns:eventsinks", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "EventSink", "metadata": hmeta("string-for-int"),
				"spec": jobj{"type": "webhook", "endpoint": "https://hooks.example.com/k", "webhook": jobj{"signatureHeader": "X-Signature", "maxAttempts": "3"}}})},
			code: badRequest, want: []string{"maxAttempts"}, absent: "eventsinks/string-for-int",
		},
		{
			name: "malformed JSON",
			req:  hostileRequest{path: "ns:scopes", body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"malformed"`)},
			code: badRequest, absent: "scopes/malformed",
		},
		{
			name: "a body of the wrong content type",
			req:  hostileRequest{path: "ns:scopes", contentType: "text/plain", body: hostileJSON(scopeObj(hmeta("text-plain")))},
			code: unsupported, absent: "scopes/text-plain",
		},
		{
			name: "a body of an encoding these kinds do not have",
			req:  hostileRequest{path: "ns:scopes", contentType: "application/vnd.kubernetes.protobuf", body: []byte("k8s\x00\x0a\x0bgarbage")},
			code: unsupported,
		},
		{
			name: "YAML with exponential aliases",
			req: hostileRequest{path: "ns:scopes", contentType: "application/yaml", body: []byte(`apiVersion: kollect.dev/v1alpha1
kind: Scope
metadata: {name: yaml-bomb}
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`)},
			code: badRequest, absent: "scopes/yaml-bomb",
		},
		{
			name: "strategic merge patch with an unknown directive",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/strategic-merge-patch+json",
				body: []byte(`{"metadata":{"labels":{"patched":"yes"}},"spec":{"$patch":"explode"}}`)},
			code: badRequest, want: []string{"unknown patch type: explode"},
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				if l := h.get(t, ctx, "scopes/known").GetLabels(); l["patched"] != "" {
					t.Errorf("the strategic merge patch was applied: %v", l)
				}
			},
		},
		{
			name: "strategic merge patch deleting metadata",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/strategic-merge-patch+json",
				body: []byte(`{"metadata":{"$patch":"delete"}}`)},
			code: badRequest,
		},
		{
			name: "strategic merge patch writing status through the main resource",
			req: hostileRequest{method: http.MethodPatch, path: "ns:targets/forge", contentType: "application/strategic-merge-patch+json",
				body: hostileJSON(jobj{"status": forgedStatus})},
			code: ok,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				expectServerRequester(t, r.object(t), h.adminName)
				expectNotForged(t, r.object(t))
			},
		},
		{
			name: "merge patch with malformed JSON",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/merge-patch+json",
				body: []byte(`{"spec":{"minExportInterval":`)},
			code: badRequest,
		},
		{
			name: "JSON patch with an unknown operation",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/json-patch+json",
				body: []byte(`[{"op":"explode","path":"/spec"}]`)},
			code: invalid,
		},

		// Paths that lead nowhere.
		{
			name: "delete of an object that does not exist",
			req:  hostileRequest{method: http.MethodDelete, path: "ns:targets/never-created"},
			code: notFound, want: []string{`targets.kollect.dev \"never-created\" not found`},
		},
		{
			name: "list with a forged continue token",
			req:  hostileRequest{method: http.MethodGet, path: "ns:targets", query: "limit=1&continue=Zm9yZ2Vk"},
			code: badRequest, want: []string{"continue"},
		},
		{
			name: "list with a field selector on a field that is not selectable",
			req:  hostileRequest{method: http.MethodGet, path: "ns:targets", query: "fieldSelector=status.requester.username%3Dsystem%3Aadmin"},
			code: badRequest, want: []string{"status.requester.username"},
		},
		{
			name: "create of an InventoryItem",
			req: hostileRequest{path: "ns:inventoryitems", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "InventoryItem", "metadata": hmeta("forged-item"),
				"source": jobj{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}})},
			code: http.StatusMethodNotAllowed, absent: "inventoryitems/forged-item",
		},
		{
			name: "a resource that does not exist",
			req:  hostileRequest{path: "ns:gadgets", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "Gadget", "metadata": hmeta("gadget")})},
			code: notFound,
		},
	}, h.isolationCases())
}

// hostileApply runs kubectl apply as admin and fails the test on error.
func hostileApply(t *testing.T, ctx context.Context, manifest string) {
	t.Helper()
	cmd := env.Cluster.KubectlCmd(ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\nmanifest:\n%s", err, out, manifest)
	}
}

// anonymousKollectClient reaches kollect-apiserver directly with no
// credentials (TLS verified with its CA).
func anonymousKollectClient() *http.Client {
	cfg := &rest.Config{Host: env.Kollect.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: env.Cluster.KollectCAPEM()}}
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		panic(err)
	}
	return c
}

// waitCollection waits until Target name reports reason in
// status.collection for its generation, and returns the report.
func (h *hostile) waitCollection(t *testing.T, ctx context.Context, name, reason string) *v1alpha1.CollectionObservation {
	t.Helper()
	client := env.KollectClient(t).KollectV1alpha1().Targets(hostileNS)
	var last *v1alpha1.CollectionObservation
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tgt, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = tgt.Status.Collection
		return last != nil && last.Reason == reason && last.ObservedGeneration == tgt.Generation && (reason != "" || last.LastFullSyncTime != nil), nil
	})
	if err != nil {
		t.Fatalf("Target %s: status.collection %+v, want reason %q: %v", name, last, reason, err)
	}
	return last
}

// removedKind collects a kind from a CRD, then deletes the CRD.
func (h *hostile) removedKind(t *testing.T, ctx context.Context) {
	t.Helper()
	const group = "removed.hostile.example.com"
	hostileApply(t, ctx, fmt.Sprintf(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo, listKind: GizmoList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
# kollect-apiserver reads what it collects; the install grants other kinds this way.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kollect-collect-gizmos
  labels: {kollect.dev/aggregate-to-collector: "true"}
rules:
- apiGroups: [%[1]s]
  resources: [gizmos]
  verbs: [get, list, watch]
`, group))
	t.Cleanup(func() {
		_, _, _ = env.Cluster.Kubectl(context.Background(), "delete", "clusterrole", "kollect-collect-gizmos", "--ignore-not-found")
	})
	crds := env.Dynamic(t).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	gizmos := env.Dynamic(t).Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gizmos"}).Namespace(hostileNS)
	gizmo := &unstructured.Unstructured{Object: jobj{"apiVersion": group + "/v1", "kind": "Gizmo", "metadata": jobj{"name": "g1"}, "spec": jobj{"size": int64(1)}}}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := gizmos.Create(ctx, gizmo, metav1.CreateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("creating a Gizmo: %v", err)
	}
	hostileApply(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: Profile
metadata: {name: removed-kind, namespace: %[1]s}
spec:
  targetGVK: {group: %[2]s, version: v1, kind: Gizmo}
  attributes: [{name: size, path: "{.spec.size}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: Target
metadata: {name: removed-kind, namespace: %[1]s}
spec: {profileRef: {name: removed-kind}}
`, hostileNS, group))
	client := env.KollectClient(t).KollectV1alpha1().Targets(hostileNS)
	var last v1alpha1.TargetStatus
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tgt, err := client.Get(ctx, "removed-kind", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = tgt.Status
		c := tgt.Status.Collection
		return c != nil && c.ItemCount == 1 && c.Reason == "", nil
	}); err != nil {
		t.Fatalf("the Gizmo was not collected: %v; status %+v, collection %+v", err, last, last.Collection)
	}
	if err := crds.Delete(ctx, "gizmos."+group, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := crds.Get(ctx, "gizmos."+group, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the CRD is still there: %v", err)
	}
}
