package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// The cases added with issue 12 (tenant isolation), grouped by what they
// attack: metadata, the verbs, the /status subresource, the read-only item
// kinds, numbers, the Scope quotas, sink endpoints and configuration, the
// spec of every other kind, query parameters and identity. The table of
// issue 6 is in hostile_test.go; cases() runs both.
func (h *hostile) isolationCases() []hostileCase {
	return slices.Concat(h.metadataCases(), h.verbCases(), h.statusCases(), h.itemCases(), numberCases(), h.quotaCases(),
		h.sinkCases(), kindCases(), h.queryCases(), h.identityCases())
}

// kollectObj is an object of a kollect.dev kind.
func kollectObj(kind string, meta jobj, spec jobj) jobj {
	return jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}
}

// cmeta is the metadata of a cluster-scoped object.
func cmeta(name string) jobj { return jobj{"name": name} }

func webhookSpec(endpoint string) jobj {
	return jobj{"type": "webhook", "endpoint": endpoint, "webhook": jobj{"signatureHeader": "X-Signature", "maxAttempts": 3}}
}

func natsSpec(endpoint string) jobj {
	return jobj{"type": "nats", "endpoint": endpoint, "nats": jobj{"stream": "kollect"}}
}

func gitSpec(endpoint string) jobj {
	return jobj{"type": "git", "endpoint": endpoint, "git": jobj{"branch": "main"}}
}

func postgresSpec(endpoint string) jobj {
	return jobj{"type": "postgres", "endpoint": endpoint, "postgres": jobj{"schema": "public", "table": "inventory"}}
}

// with returns a copy of spec with the given fields set.
func with(spec jobj, kv ...any) jobj {
	out := jobj{}
	for k, v := range spec {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// refuse is the create of obj, which must be answered with code and a reply
// holding want, and leave nothing stored. Namespaced objects (their
// metadata has a namespace) go to namespace hostileNS.
func refuse(name, resource string, obj jobj, code int, want ...string) hostileCase {
	meta := obj["metadata"].(jobj)
	object := resource + "/" + meta["name"].(string)
	path := resource
	if _, namespaced := meta["namespace"]; namespaced {
		path = "ns:" + resource
	} else {
		object = "/" + object
	}
	return hostileCase{name: name, req: hostileRequest{path: path, body: hostileJSON(obj)}, code: code, want: want, absent: object}
}

// refuseEndpoint is a sink whose endpoint names an address sinks may not
// reach: refused at admission on spec.endpoint, with the class of the
// address and the flag that would allow it.
func refuseEndpoint(name, resource, kind, objName string, spec jobj, class string) hostileCase {
	return refuse(name, resource, kollectObj(kind, hmeta(objName), spec), http.StatusUnprocessableEntity,
		"spec.endpoint", class, "--allow-private-sink-endpoints")
}

// notEchoed checks that a secret the request carried is not in the reply.
func notEchoed(secret string) func(t *testing.T, ctx context.Context, r hostileReply) {
	return func(t *testing.T, _ context.Context, r hostileReply) {
		if bytes.Contains(r.body, []byte(secret)) {
			t.Errorf("the reply echoes the credential %q:\n%.2000s", secret, r.body)
		}
	}
}

// namesEither checks that the reply names one of the field paths.
func namesEither(paths ...string) func(t *testing.T, ctx context.Context, r hostileReply) {
	return func(t *testing.T, _ context.Context, r hostileReply) {
		for _, p := range paths {
			if bytes.Contains(r.body, []byte(p)) {
				return
			}
		}
		t.Errorf("the reply names none of the fields %v:\n%.2000s", paths, r.body)
	}
}

// jsonPatchOps is n JSON patch operations, each testing that the object is a Scope.
func jsonPatchOps(n int) []byte {
	ops := make([]any, n)
	for i := range ops {
		ops[i] = jobj{"op": "test", "path": "/kind", "value": "Scope"}
	}
	return hostileJSON(ops)
}

func (h *hostile) metadataCases() []hostileCase {
	const invalid = http.StatusUnprocessableEntity
	longTarget := strings.Repeat("t", 253)
	prefix253 := strings.Repeat("g", 252) + "-"
	return []hostileCase{
		{
			// Items carry their Target's name as a label value, which
			// may have only 63 characters: the collector shortens it.
			name: "Target name of 253 characters is accepted and collects",
			req: hostileRequest{path: "ns:targets", body: hostileJSON(targetObj(longTarget, jobj{"labelSelector": jobj{"matchLabels": jobj{"app": "long-name"}}})),
				prepare: func(t *testing.T, ctx context.Context) {
					hostileApply(t, ctx, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: long-name, namespace: %s, labels: {app: long-name}}\ndata: {a: b}\n", hostileNS))
				}},
			code: http.StatusCreated,
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				if c := h.waitCollection(t, ctx, longTarget, ""); c.ItemCount != 1 {
					t.Fatalf("status.collection %+v, want 1 item", c)
				}
				items, err := env.KollectClient(t).KollectV1alpha1().InventoryItems(hostileNS).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				// Other Targets of the namespace collect the ConfigMap too;
				// this one's item carries a shortened name.
				var labels []string
				for _, it := range items.Items {
					if l := it.Labels[v1alpha1.LabelTarget]; it.Source.Name == "long-name" {
						labels = append(labels, l)
						if strings.HasPrefix(l, "tttt") && len(utilvalidation.IsValidLabelValue(l)) == 0 {
							return
						}
					}
				}
				t.Errorf("no item of the ConfigMap long-name has a valid %s label shortening the Target's name: %q", v1alpha1.LabelTarget, labels)
			},
		},
		refuse("sink name of 254 characters", "eventsinks", kollectObj("EventSink", hmeta(strings.Repeat("s", 254)), webhookSpec("https://hooks.hostile.invalid/k")),
			invalid, "metadata.name", "must be no more than 253 characters"),
		refuse("name with a slash", "scopes", scopeObj(hmeta("a/b")), invalid, "metadata.name", "RFC 1123 subdomain"),
		{
			name: "name with a NUL byte",
			req:  hostileRequest{path: "ns:scopes", body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"nul\u0000name"},"spec":{}}`)},
			code: invalid, want: []string{"metadata.name", "Invalid value"},
		},
		{
			name: "name with an overlong UTF-8 encoding of '/'",
			req:  hostileRequest{path: "ns:scopes", body: []byte("{\"apiVersion\":\"kollect.dev/v1alpha1\",\"kind\":\"Scope\",\"metadata\":{\"name\":\"over\xc0\xaflong\"},\"spec\":{}}")},
			code: invalid, want: []string{"metadata.name", "Invalid value"},
		},
		{
			name: "name of a lone UTF-16 surrogate escape",
			req:  hostileRequest{path: "ns:scopes", body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"lone-\ud800"},"spec":{}}`)},
			code: invalid, want: []string{"metadata.name", "Invalid value"},
		},
		{
			name: "generateName with characters a name may not have",
			req:  hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(jobj{"generateName": "Bad_Prefix-", "namespace": hostileNS}))},
			code: invalid, want: []string{"metadata.generateName"},
			check: func(t *testing.T, ctx context.Context, _ hostileReply) { h.expectNoneNamed(t, ctx, "scopes", "bad") },
		},
		{
			name: "generateName of 253 characters is cut to a valid name",
			req:  hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(jobj{"generateName": prefix253, "namespace": hostileNS}))},
			code: http.StatusCreated,
			check: func(t *testing.T, _ context.Context, r hostileReply) {
				if n := r.object(t).GetName(); len(n) != 63 || !strings.HasPrefix(n, prefix253[:58]) {
					t.Errorf("generated name %q (%d characters), want the prefix cut to 58 and 5 random characters", n, len(n))
				}
			},
		},
		{
			name: "generateName of 300 characters",
			req:  hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(jobj{"generateName": strings.Repeat("x", 299) + "-", "namespace": hostileNS}))},
			code: invalid, want: []string{"metadata.generateName", "must be no more than 253 characters"},
			check: func(t *testing.T, ctx context.Context, _ hostileReply) { h.expectNoneNamed(t, ctx, "scopes", "xxxx") },
		},
		{
			// The field manager drops managedFields that do not decode
			// before validation sees them.
			name: "managedFields with an operation that does not exist are dropped",
			req: hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(jobj{"name": "managed-fields", "namespace": hostileNS,
				"managedFields": []any{jobj{"manager": "forger", "operation": "Explode", "apiVersion": "kollect.dev/v1alpha1", "fieldsType": "FieldsV1", "fieldsV1": jobj{"f:spec": jobj{}}}}}))},
			code: http.StatusCreated,
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				for _, mf := range h.get(t, ctx, "scopes/managed-fields").GetManagedFields() {
					if mf.Manager == "forger" || mf.Operation == "Explode" {
						t.Errorf("the forged managedFields entry was stored: %+v", mf)
					}
				}
			},
		},
		refuse("ownerReference without a uid", "scopes", scopeObj(jobj{"name": "owner-no-uid", "namespace": hostileNS,
			"ownerReferences": []any{jobj{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": ""}}}),
			invalid, "metadata.ownerReferences.uid", "must not be empty"),
		refuse("two controller ownerReferences", "scopes", scopeObj(jobj{"name": "owner-two-controllers", "namespace": hostileNS,
			"ownerReferences": []any{
				jobj{"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "00000000-0000-0000-0000-00000000000a", "controller": true},
				jobj{"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": "00000000-0000-0000-0000-00000000000b", "controller": true},
			}}),
			invalid, "metadata.ownerReferences", "Only one reference can have Controller set to true"),
		refuse("finalizer that is not a qualified name", "scopes", scopeObj(jobj{"name": "bad-finalizer", "namespace": hostileNS, "finalizers": []any{"never ever"}}),
			invalid, "metadata.finalizers", "never ever"),
		refuse("label value of 64 characters", "scopes", scopeObj(jobj{"name": "label-64", "namespace": hostileNS, "labels": jobj{"team": strings.Repeat("v", 64)}}),
			invalid, "metadata.labels", "must be no more than 63 bytes"),
		refuse("label key with a name part of 64 characters", "scopes", scopeObj(jobj{"name": "label-key-64", "namespace": hostileNS, "labels": jobj{strings.Repeat("k", 64): "v"}}),
			invalid, "metadata.labels", "name part must be no more than 63 bytes"),
		{
			name: "annotations of exactly 256 KiB are accepted",
			req: hostileRequest{path: "ns:scopes", body: hostileJSON(scopeObj(jobj{"name": "annotations-256kib", "namespace": hostileNS,
				"annotations": jobj{"hostile": strings.Repeat("a", 256<<10-len("hostile"))}}))},
			code: http.StatusCreated,
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				if n := len(h.get(t, ctx, "scopes/annotations-256kib").GetAnnotations()["hostile"]); n != 256<<10-len("hostile") {
					t.Errorf("the annotation reads back with %d bytes", n)
				}
			},
		},
		{
			// A forged deletionTimestamp would make the controllers treat
			// the object as being deleted.
			name: "forged deletionTimestamp on create is dropped",
			req: hostileRequest{path: "ns:targets", body: hostileJSON(func() jobj {
				o := targetObj("forged-deletion", nil)
				m := o["metadata"].(jobj)
				m["deletionTimestamp"], m["deletionGracePeriodSeconds"] = "2020-01-01T00:00:00Z", 0
				return o
			}())},
			code: http.StatusCreated,
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				u := h.get(t, ctx, "targets/forged-deletion")
				if u.GetDeletionTimestamp() != nil || u.GetDeletionGracePeriodSeconds() != nil {
					t.Errorf("the forged deletion was stored: deletionTimestamp %v, grace %v", u.GetDeletionTimestamp(), u.GetDeletionGracePeriodSeconds())
				}
			},
		},
		{
			name: "namespace in the body is not the namespace of the URL",
			req: hostileRequest{path: "ns:targets", body: hostileJSON(func() jobj {
				o := targetObj("other-namespace", nil)
				o["metadata"].(jobj)["namespace"] = "default"
				return o
			}())},
			code: http.StatusBadRequest, want: []string{"does not match the namespace"}, absent: "targets/other-namespace",
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				if _, err := env.KollectClient(t).KollectV1alpha1().Targets("default").Get(ctx, "other-namespace", metav1.GetOptions{}); err == nil {
					t.Errorf("the Target was stored in namespace default")
				}
			},
		},
		{
			name: "name in the body is not the name of the URL on update",
			req: hostileRequest{method: http.MethodPut, path: "ns:scopes/known",
				body: hostileJSON(scopeObj(hmeta("renamed")))},
			code: http.StatusBadRequest, want: []string{"does not match the name on the URL"}, unchanged: []string{"scopes/known"}, absent: "scopes/renamed",
		},
	}
}

func (h *hostile) verbCases() []hostileCase {
	known := []string{"scopes/known"}
	deepYAML := "apiVersion: kollect.dev/v1alpha1\nkind: Scope\nmetadata: {name: known}\nspec: {}\nhostile: " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "\n"
	return []hostileCase{
		{
			name: "update with a stale resourceVersion",
			req: hostileRequest{method: http.MethodPut, path: "ns:scopes/known",
				body: hostileJSON(kollectObj("Scope", jobj{"name": "known", "namespace": hostileNS, "resourceVersion": "1"}, jobj{"minExportInterval": "2m"}))},
			code: http.StatusConflict, want: []string{"the object has been modified"}, unchanged: known,
		},
		{
			name: "update with a resourceVersion that is not a number",
			req: hostileRequest{method: http.MethodPut, path: "ns:scopes/known",
				body: hostileJSON(kollectObj("Scope", jobj{"name": "known", "namespace": hostileNS, "resourceVersion": "abc"}, jobj{"minExportInterval": "2m"}))},
			code: http.StatusBadRequest, want: []string{"resourceVersion"}, unchanged: known,
		},
		{
			name: "merge patch with a stale resourceVersion",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/merge-patch+json",
				body: []byte(`{"metadata":{"resourceVersion":"1"},"spec":{"minExportInterval":"2m"}}`)},
			code: http.StatusConflict, want: []string{"the object has been modified"}, unchanged: known,
		},
		{
			name: "JSON patch of 10,001 operations",
			req:  hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/json-patch+json", body: jsonPatchOps(10001)},
			code: http.StatusRequestEntityTooLarge, want: []string{"The allowed maximum operations in a JSON patch is 10000"}, unchanged: known,
		},
		{
			name: "JSON patch whose test fails applies nothing",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/json-patch+json",
				body: []byte(`[{"op":"replace","path":"/spec/minExportInterval","value":"2m"},{"op":"test","path":"/spec/minExportInterval","value":"5m"}]`)},
			code: http.StatusUnprocessableEntity, want: []string{"Invalid"}, unchanged: known,
		},
		{
			name: "JSON patch renaming the object",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/json-patch+json",
				body: []byte(`[{"op":"replace","path":"/metadata/name","value":"renamed-by-patch"}]`)},
			code: http.StatusBadRequest, want: []string{"renamed-by-patch"}, unchanged: known, absent: "scopes/renamed-by-patch",
		},
		{
			name: "merge patch that is a JSON array",
			req:  hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/merge-patch+json", body: []byte(`[1,2,3]`)},
			code: http.StatusBadRequest, want: []string{"error decoding patch"}, unchanged: known,
		},
		{
			name: "merge patch nested 100,000 deep",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/merge-patch+json",
				body: []byte(`{"spec":` + nestedJSON(100000, true) + `}`)},
			code: http.StatusBadRequest, want: []string{"exceeded max depth"}, unchanged: known,
		},
		{
			name: "strategic merge patch with an unknown field, strict field validation",
			req: hostileRequest{method: http.MethodPatch, path: "ns:eventsinks/known", contentType: "application/strategic-merge-patch+json", query: "fieldValidation=Strict",
				body: []byte(`{"spec":{"endpoint":"https://hooks.hostile.invalid/other","bogus":true}}`)},
			code: http.StatusUnprocessableEntity, want: []string{"patch", `unknown field \"spec.bogus\"`}, unchanged: []string{"eventsinks/known"},
		},
		{
			name: "patch of a content type that is no patch",
			req:  hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/xml", body: []byte(`<spec/>`)},
			code: http.StatusUnsupportedMediaType, want: []string{"UnsupportedMediaType"}, unchanged: known,
		},
		{
			name: "server-side apply carrying managedFields",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/apply-patch+yaml", query: "fieldManager=hostile&force=true",
				body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "Scope",
					"metadata": jobj{"name": "known", "managedFields": []any{jobj{"manager": "system:admin", "operation": "Apply", "apiVersion": "kollect.dev/v1alpha1", "fieldsType": "FieldsV1", "fieldsV1": jobj{}}}},
					"spec":     jobj{"minExportInterval": "1m"}})},
			code: http.StatusBadRequest, want: []string{"metadata.managedFields must be nil"}, unchanged: known,
		},
		{
			name: "server-side apply without a field manager",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/apply-patch+yaml",
				body: []byte("apiVersion: kollect.dev/v1alpha1\nkind: Scope\nmetadata: {name: known}\nspec: {minExportInterval: 2m}\n")},
			code: http.StatusUnprocessableEntity, want: []string{"fieldManager"}, unchanged: known,
		},
		{
			name: "field manager of 129 characters",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/merge-patch+json", query: "fieldManager=" + strings.Repeat("m", 129),
				body: []byte(`{"spec":{"minExportInterval":"2m"}}`)},
			code: http.StatusUnprocessableEntity, want: []string{"fieldManager", "128"}, unchanged: known,
		},
		{
			name: "server-side apply conflicting with another manager, not forced",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/apply-patch+yaml", query: "fieldManager=hostile",
				body: []byte("apiVersion: kollect.dev/v1alpha1\nkind: Scope\nmetadata: {name: known}\nspec: {minExportInterval: 2m}\n")},
			code: http.StatusConflict, want: []string{"conflict", ".spec.minExportInterval"}, unchanged: known,
		},
		{
			name: "server-side apply of YAML nested 100,000 deep",
			req:  hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/apply-patch+yaml", query: "fieldManager=hostile&force=true", body: []byte(deepYAML)},
			code: http.StatusBadRequest, want: []string{"exceeded max depth of 10000"}, unchanged: known,
		},
		{
			name: "server-side apply of another kind",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/apply-patch+yaml", query: "fieldManager=hostile&force=true",
				body: []byte("apiVersion: kollect.dev/v1alpha1\nkind: Target\nmetadata: {name: known}\nspec: {profileRef: {name: known}}\n")},
			code: http.StatusBadRequest, want: []string{"invalid object type", "Kind=Target"}, unchanged: known,
		},
		{
			name: "delete with a UID precondition that does not match",
			req: hostileRequest{method: http.MethodDelete, path: "ns:scopes/known",
				body: []byte(`{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}}`)},
			code: http.StatusConflict, want: []string{"the UID in the precondition"}, unchanged: known,
		},
		{
			name: "delete with a stale resourceVersion precondition",
			req: hostileRequest{method: http.MethodDelete, path: "ns:scopes/known",
				body: []byte(`{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"1"}}`)},
			code: http.StatusConflict, want: []string{"the ResourceVersion in the precondition"}, unchanged: known,
		},
		{
			name: "delete with a propagation policy that does not exist",
			req: hostileRequest{method: http.MethodDelete, path: "ns:scopes/known",
				body: []byte(`{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Explode"}`)},
			code: http.StatusUnprocessableEntity, want: []string{"propagationPolicy"}, unchanged: known,
		},
		{
			name: "dry-run delete keeps the object",
			req:  hostileRequest{method: http.MethodDelete, path: "ns:scopes/known", query: "dryRun=All"},
			code: http.StatusOK, want: []string{`"name":"known"`}, unchanged: known,
		},
		{
			name: "dry-run create stores nothing",
			req:  hostileRequest{path: "ns:targets", query: "dryRun=All", body: hostileJSON(targetObj("dry-run", nil))},
			code: http.StatusCreated, absent: "targets/dry-run",
		},
		{
			name: "dry run of a mode that does not exist",
			req:  hostileRequest{path: "ns:targets", query: "dryRun=Explode", body: hostileJSON(targetObj("dry-run-explode", nil))},
			code: http.StatusUnprocessableEntity, want: []string{"dryRun", "Unsupported value"}, absent: "targets/dry-run-explode",
		},
		{
			name: "delete collection with a malformed label selector",
			req:  hostileRequest{method: http.MethodDelete, path: "ns:eventsinks", query: "labelSelector=a+in+("},
			code: http.StatusBadRequest, want: []string{"unable to parse requirement"}, unchanged: []string{"eventsinks/known"},
		},
	}
}

func (h *hostile) statusCases() []hostileCase {
	const invalid = http.StatusUnprocessableEntity
	sinkStatus := func(status jobj) []byte {
		return hostileJSON(jobj{"status": status})
	}
	return []hostileCase{
		{
			name: "status write by a namespace editor",
			req: hostileRequest{method: http.MethodPatch, path: "ns:targets/forge/status", contentType: "application/merge-patch+json", client: h.forger,
				body: []byte(`{"status":{"collection":{"itemCount":999,"overQuotaCount":0,"reason":"Forged"}}}`)},
			code: http.StatusForbidden, want: []string{"targets/status"}, unchanged: []string{"targets/forge"}, check: h.statusLacks("targets/forge", `"itemCount":999`),
		},
		{
			name: "sink status write by a namespace editor",
			req: hostileRequest{method: http.MethodPatch, path: "ns:eventsinks/known/status", contentType: "application/merge-patch+json", client: h.forger,
				body: sinkStatus(jobj{"probe": jobj{"succeeded": true, "outcome": "Succeeded", "message": "forged"}})},
			code: http.StatusForbidden, want: []string{"eventsinks/status"}, unchanged: []string{"eventsinks/known"}, check: h.statusLacks("eventsinks/known", `"forged"`),
		},
		{
			name: "forged probe and requester through the sink's main resource are ignored",
			req: hostileRequest{method: http.MethodPatch, path: "ns:eventsinks/known", contentType: "application/merge-patch+json",
				body: sinkStatus(jobj{"probe": jobj{"succeeded": true, "outcome": "Succeeded", "message": "forged"},
					"requester": jobj{"username": "system:admin", "groups": []any{"forged:group"}}, "conditions": []any{jobj{"type": "Ready", "status": "True", "reason": "Forged", "message": "forged", "lastTransitionTime": "2020-01-01T00:00:00Z"}}})},
			code: http.StatusOK,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				for _, u := range []*unstructured.Unstructured{r.object(t), h.get(t, ctx, "eventsinks/known")} {
					if msg, _, _ := unstructured.NestedString(u.Object, "status", "probe", "message"); msg == "forged" {
						t.Errorf("the forged probe was stored: %v", u.Object["status"])
					}
					expectServerRequester(t, u, h.adminName)
					expectNotForged(t, u)
				}
			},
		},
		{
			name: "forged requester through a sink's /status is ignored",
			req: hostileRequest{method: http.MethodPatch, path: "ns:eventsinks/known/status", contentType: "application/merge-patch+json",
				body: sinkStatus(jobj{"requester": jobj{"username": "system:admin", "groups": []any{"forged:group"}}})},
			code: http.StatusOK,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				for _, u := range []*unstructured.Unstructured{r.object(t), h.get(t, ctx, "eventsinks/known")} {
					expectServerRequester(t, u, h.adminName)
				}
			},
		},
		{
			name: "probe outcome that is not a class",
			req: hostileRequest{method: http.MethodPatch, path: "ns:eventsinks/known/status", contentType: "application/merge-patch+json",
				body: sinkStatus(jobj{"probe": jobj{"outcome": "connection refused by 10.0.0.7:5432 (postgres 16.2)"}})},
			code: invalid, want: []string{"status.probe.outcome"}, unchanged: []string{"eventsinks/known"}, check: h.statusLacks("eventsinks/known", "10.0.0.7"),
		},
		{
			name: "probe message over 4096 bytes",
			req: hostileRequest{method: http.MethodPatch, path: "ns:eventsinks/known/status", contentType: "application/merge-patch+json",
				body: sinkStatus(jobj{"probe": jobj{"message": strings.Repeat("m", 4097)}})},
			code: invalid, want: []string{"status.probe.message", "may not be more than 4096 bytes"}, unchanged: []string{"eventsinks/known"},
			check: h.statusLacks("eventsinks/known", strings.Repeat("m", 4097)),
		},
		{
			name: "sink condition of a status that does not exist",
			req: hostileRequest{method: http.MethodPatch, path: "ns:eventsinks/known/status", contentType: "application/merge-patch+json",
				body: sinkStatus(jobj{"conditions": []any{jobj{"type": "Ready", "status": "Maybe", "reason": "Forged", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"}}})},
			code: invalid, want: []string{"status.conditions[0].status"}, unchanged: []string{"eventsinks/known"}, check: h.statusLacks("eventsinks/known", `"Maybe"`),
		},
		{
			name: "negative item count through /status",
			req: hostileRequest{method: http.MethodPatch, path: "ns:targets/forge/status", contentType: "application/merge-patch+json",
				body: []byte(`{"status":{"collection":{"observedGeneration":1,"itemCount":-1}}}`)},
			code: invalid, want: []string{"status.collection.itemCount", "greater than or equal to 0"}, unchanged: []string{"targets/forge"},
			check: h.statusLacks("targets/forge", `"itemCount":-1`),
		},
		{
			name: "negative overQuotaCount through /status",
			req: hostileRequest{method: http.MethodPatch, path: "ns:targets/forge/status", contentType: "application/merge-patch+json",
				body: []byte(`{"status":{"collection":{"observedGeneration":1,"overQuotaCount":-50}}}`)},
			code: invalid, want: []string{"status.collection.overQuotaCount", "greater than or equal to 0"}, unchanged: []string{"targets/forge"},
			check: h.statusLacks("targets/forge", `"overQuotaCount":-50`),
		},
		{
			name: "collection error over 4096 bytes through /status",
			req: hostileRequest{method: http.MethodPatch, path: "ns:targets/forge/status", contentType: "application/merge-patch+json",
				body: hostileJSON(jobj{"status": jobj{"collection": jobj{"observedGeneration": 1, "lastError": strings.Repeat("e", 5000)}}})},
			code: invalid, want: []string{"status.collection.lastError", "may not be more than 4096 bytes"}, unchanged: []string{"targets/forge"},
			check: h.statusLacks("targets/forge", strings.Repeat("e", 4097)),
		},
		{
			name: "export entry of an outcome that does not exist",
			req: hostileRequest{method: http.MethodPatch, path: "ns:inventories/exports/status", contentType: "application/merge-patch+json",
				body: hostileJSON(jobj{"status": jobj{"sinkExports": []any{jobj{"family": "Event", "name": "known", "outcome": "Pwned"}}}})},
			code: invalid, want: []string{"status.sinkExports[0].outcome", "Unsupported value"}, unchanged: []string{"inventories/exports"},
			check: h.statusLacks("inventories/exports", "Pwned"),
		},
		{
			name: "status of a kind without a status subresource",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known/status", contentType: "application/merge-patch+json",
				body: []byte(`{"status":{"forged":true}}`)},
			code: http.StatusNotFound, want: []string{"NotFound"}, unchanged: []string{"scopes/known"},
		},
	}
}

func (h *hostile) itemCases() []hostileCase {
	const notAllowed = http.StatusMethodNotAllowed
	item := hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "InventoryItem", "metadata": hmeta("forged-item"),
		"source": jobj{"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}})
	return []hostileCase{
		{
			name: "update of an InventoryItem",
			req:  hostileRequest{method: http.MethodPut, path: "ns:inventoryitems/forged-item", body: item},
			code: notAllowed, want: []string{"MethodNotAllowed"}, absent: "inventoryitems/forged-item",
		},
		{
			name: "patch of an InventoryItem",
			req:  hostileRequest{method: http.MethodPatch, path: "ns:inventoryitems/forged-item", contentType: "application/merge-patch+json", body: []byte(`{"attributes":{"x":1}}`)},
			code: notAllowed, want: []string{"MethodNotAllowed"},
		},
		{
			name: "delete of an InventoryItem",
			req:  hostileRequest{method: http.MethodDelete, path: "ns:inventoryitems/forged-item"},
			code: notAllowed, want: []string{"MethodNotAllowed"},
		},
		{
			// The items the collector wrote must survive it.
			name: "delete of every InventoryItem of a namespace",
			req:  hostileRequest{method: http.MethodDelete, path: "ns:inventoryitems"},
			code: notAllowed, want: []string{"MethodNotAllowed"},
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				list, err := env.KollectClient(t).KollectV1alpha1().InventoryItems(hostileNS).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(list.Items) == 0 {
					t.Errorf("no InventoryItems left in %s", hostileNS)
				}
			},
		},
		{
			name: "create of a ClusterInventoryItem",
			req: hostileRequest{path: "clusterinventoryitems", body: hostileJSON(jobj{"apiVersion": "kollect.dev/v1alpha1", "kind": "ClusterInventoryItem", "metadata": cmeta("hostile-forged-item"),
				"source": jobj{"apiVersion": "v1", "kind": "Namespace", "name": "x"}})},
			code: notAllowed, want: []string{"MethodNotAllowed"}, absent: "/clusterinventoryitems/hostile-forged-item",
		},
		{
			name: "InventoryItems listed with a field selector on a field that is not selectable",
			req:  hostileRequest{method: http.MethodGet, path: "ns:inventoryitems", query: "fieldSelector=content.data%3Dx"},
			code: http.StatusBadRequest, want: []string{"content.data"},
		},
		{
			name: "InventoryItems listed with a field selector on an attribute that cannot be named",
			req:  hostileRequest{method: http.MethodGet, path: "ns:inventoryitems", query: "fieldSelector=attributes.9lives%3Dx"},
			code: http.StatusBadRequest, want: []string{"attributes.9lives", "is not an attribute name"},
		},
		{
			name: "InventoryItems listed with a field selector on an attribute name of 64 characters",
			req:  hostileRequest{method: http.MethodGet, path: "ns:inventoryitems", query: "fieldSelector=attributes." + strings.Repeat("a", 64) + "%3Dx"},
			code: http.StatusBadRequest, want: []string{"at most 63 characters"},
		},
		{
			name: "InventoryItems listed by an attribute no item selects",
			req:  hostileRequest{method: http.MethodGet, path: "ns:inventoryitems", query: "fieldSelector=attributes.data%3Dx"},
			code: http.StatusOK,
		},
		{
			name: "InventoryItems watched with a malformed label selector",
			req:  hostileRequest{method: http.MethodGet, path: "ns:inventoryitems", query: "watch=true&labelSelector=kollect.dev%2Ftarget+notin+(a"},
			code: http.StatusBadRequest, want: []string{"unable to parse requirement"},
		},
	}
}

func numberCases() []hostileCase {
	const badRequest = http.StatusBadRequest
	hook := func(name string, attempts string) []byte {
		return []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"EventSink","metadata":{"name":"` + name + `"},"spec":{"type":"webhook","endpoint":"https://hooks.hostile.invalid/k","webhook":{"signatureHeader":"X-Signature","maxAttempts":` + attempts + `}}}`)
	}
	scope := func(name, field, value string) []byte {
		return []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"` + name + `"},"spec":{"` + field + `":` + value + `}}`)
	}
	return []hostileCase{
		{
			name: "a float where an integer is expected",
			req:  hostileRequest{path: "ns:eventsinks", body: hook("float-attempts", "3.5")},
			code: badRequest, want: []string{"maxAttempts"}, absent: "eventsinks/float-attempts",
		},
		{
			name: "maxTargets of 2^31",
			req:  hostileRequest{path: "ns:scopes", body: scope("max-targets-overflow", "maxTargets", "2147483648")},
			code: badRequest, want: []string{"maxTargets"}, absent: "scopes/max-targets-overflow",
		},
		{
			name: "maxItems of 2^63",
			req:  hostileRequest{path: "ns:scopes", body: scope("max-items-overflow", "maxItems", "9223372036854775808")},
			code: badRequest, want: []string{"maxItems"}, absent: "scopes/max-items-overflow",
		},
		{
			name: "generation as a string",
			req:  hostileRequest{path: "ns:scopes", body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"generation-string","generation":"1"},"spec":{}}`)},
			code: badRequest, want: []string{"generation"}, absent: "scopes/generation-string",
		},
	}
}

// quotaCases are the Scope and ClusterScope quota fields of issue 12.
func (h *hostile) quotaCases() []hostileCase {
	const invalid = http.StatusUnprocessableEntity
	negative := func(field string, value any) hostileCase {
		return refuse("negative "+field, "scopes", kollectObj("Scope", hmeta("negative-"+strings.ToLower(field)), jobj{field: value}),
			invalid, "spec."+field, "greater than or equal to 0")
	}
	return []hostileCase{
		negative("maxTargets", -1),
		negative("maxInventories", -1),
		negative("maxSinks", -1),
		negative("maxItems", -1),
		negative("maxItemBytes", "-1"),
		refuse("negative maxItems on a ClusterScope", "clusterscopes", kollectObj("ClusterScope", cmeta("hostile-negative-items"), jobj{"maxItems": -100}),
			invalid, "spec.maxItems", "greater than or equal to 0"),
		refuse("maxItemBytes over etcd's request limit", "scopes", kollectObj("Scope", hmeta("max-item-bytes-2mi"), jobj{"maxItemBytes": "2Mi"}),
			invalid, "spec.maxItemBytes"),
		refuse("maxItemBytes of 10^30 bytes", "scopes", kollectObj("Scope", hmeta("max-item-bytes-huge"), jobj{"maxItemBytes": "1e30"}),
			invalid, "spec.maxItemBytes"),
		refuse("maxItemBytes one byte over 1.5Mi on a ClusterScope", "clusterscopes", kollectObj("ClusterScope", cmeta("hostile-item-bytes-over"), jobj{"maxItemBytes": "1572865"}),
			invalid, "spec.maxItemBytes"),
		refuse("maxItemBytes of a tenth of a byte", "scopes", kollectObj("Scope", hmeta("max-item-bytes-milli"), jobj{"maxItemBytes": "100m"}),
			invalid, "spec.maxItemBytes", "whole number of bytes"),
		refuse("maxItemBytes that is not a quantity", "scopes", kollectObj("Scope", hmeta("max-item-bytes-words"), jobj{"maxItemBytes": "lots"}),
			http.StatusBadRequest, "quantities must match the regular expression"),
		{
			name: "maxItemBytes of exactly 1.5Mi is accepted",
			req:  hostileRequest{path: "ns:scopes", body: hostileJSON(kollectObj("Scope", hmeta("max-item-bytes-limit"), jobj{"maxItemBytes": "1.5Mi"}))},
			code: http.StatusCreated,
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				if q, _, _ := unstructured.NestedString(h.get(t, ctx, "scopes/max-item-bytes-limit").Object, "spec", "maxItemBytes"); q != "1536Ki" {
					t.Errorf("spec.maxItemBytes reads back as %q, want 1536Ki", q)
				}
			},
		},
		{
			name: "forged overQuotaCount through the main resource is ignored",
			req: hostileRequest{method: http.MethodPatch, path: "ns:targets/forge", contentType: "application/merge-patch+json",
				body: []byte(`{"status":{"collection":{"observedGeneration":1,"itemCount":999,"overQuotaCount":777,"reason":"Forged"}}}`)},
			code: http.StatusOK,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				for _, u := range []*unstructured.Unstructured{r.object(t), h.get(t, ctx, "targets/forge")} {
					if n, _, _ := unstructured.NestedInt64(u.Object, "status", "collection", "overQuotaCount"); n == 777 {
						t.Errorf("the forged overQuotaCount was stored: %v", u.Object["status"])
					}
					expectNotForged(t, u)
				}
			},
		},
	}
}

func (h *hostile) sinkCases() []hostileCase {
	const invalid = http.StatusUnprocessableEntity
	hook := func(name, endpoint, class string) hostileCase {
		return refuseEndpoint("webhook on "+name, "eventsinks", "EventSink", "webhook-"+strings.ToLower(strings.NewReplacer(" ", "-", ".", "-").Replace(name)), webhookSpec(endpoint), class)
	}
	notHost := func(name, endpoint string) hostileCase {
		return refuse("webhook on "+name, "eventsinks", kollectObj("EventSink", hmeta("webhook-"+strings.ToLower(strings.ReplaceAll(name, " ", "-"))), webhookSpec(endpoint)),
			invalid, "spec.endpoint", "must name a host")
	}
	// The body of the key is base64 of "hostile-private-key-material".
	privateKey := "-----BEGIN PRIVATE KEY-----\naG9zdGlsZS1wcml2YXRlLWtleS1tYXRlcmlhbA==\n-----END PRIVATE KEY-----\n"
	return []hostileCase{
		// This server confines file sinks to --file-sink-root/<namespace>
		// (refusing them without the flag is TestFileSinkConfinement's)
		// and has no --allow-local-git-sinks.
		refuse("file sink endpoint climbing out of its namespace directory", "snapshotsinks", kollectObj("SnapshotSink", hmeta("file-sink"),
			jobj{"type": "file", "endpoint": "file:///reports/../../etcd"}),
			invalid, "spec.endpoint", "'..'"),
		refuse("file sink with a path template leaving its directory", "snapshotsinks", kollectObj("SnapshotSink", hmeta("file-template"),
			jobj{"type": "file", "endpoint": "file:///reports", "file": jobj{"pathTemplate": "../../{namespace}/{inventory}.{ext}"}}),
			invalid, "spec.file.pathTemplate", `must not contain \"..\" segments`),
		{
			name: "git sink on a local repository without --allow-local-git-sinks",
			req:  hostileRequest{path: "ns:snapshotsinks", body: hostileJSON(kollectObj("SnapshotSink", hmeta("git-local"), gitSpec("file:///var/lib/kollect/export/git")))},
			code: invalid, want: []string{"--allow-local-git-sinks"}, absent: "snapshotsinks/git-local",
			check: namesEither("spec.endpoint", "spec.type"),
		},

		// Credentials belong in the Secret, and never come back in the reply.
		func() hostileCase {
			c := refuse("git endpoint with a password", "snapshotsinks", kollectObj("SnapshotSink", hmeta("git-password"), gitSpec("https://bot:s3cr3t-pa55@git.hostile.invalid/org/repo.git")),
				invalid, "spec.endpoint", "must not contain credentials")
			c.check = notEchoed("s3cr3t-pa55")
			return c
		}(),
		func() hostileCase {
			c := refuse("postgres endpoint with a password parameter", "databasesinks", kollectObj("DatabaseSink", hmeta("postgres-password"),
				postgresSpec("postgres://db.hostile.invalid:5432/inventory?user=kollect&password=pg-s3cr3t")),
				invalid, "spec.endpoint", "must not contain credentials")
			c.check = notEchoed("pg-s3cr3t")
			return c
		}(),
		func() hostileCase {
			c := refuse("CA bundle holding a private key", "eventsinks", kollectObj("EventSink", hmeta("ca-private-key"),
				with(webhookSpec("https://hooks.hostile.invalid/k"), "tls", jobj{"caBundle": []byte(privateKey)})),
				invalid, "spec.tls.caBundle", "must hold only PEM CERTIFICATE blocks, not PRIVATE KEY")
			c.check = notEchoed("aG9zdGlsZS1wcml2YXRl")
			return c
		}(),
		refuse("CA bundle that is not base64", "eventsinks", kollectObj("EventSink", hmeta("ca-not-base64"),
			with(webhookSpec("https://hooks.hostile.invalid/k"), "tls", jobj{"caBundle": "not base64!"})),
			http.StatusBadRequest, "illegal base64 data"),

		// Addresses sinks may not reach, by every spelling admission sees.
		notHost("a decimal IPv4 address", "http://2130706433/hook"),
		notHost("a hex IPv4 address", "http://0x7f.0.0.1/hook"),
		hook("an IPv4-mapped loopback address", "http://[::ffff:127.0.0.1]:8080/hook", "loopback"),
		hook("a NAT64 metadata address", "http://[64:ff9b::a9fe:a9fe]/latest", "cloud metadata"),
		hook("the metadata name", "http://metadata.google.internal/computeMetadata/v1/", "cloud metadata"),
		hook("a name under localhost", "http://kollect.localhost:8080/hook", "loopback"),
		hook("a zoned link-local address", "https://[fe80::1%25eth0]/hook", "link-local"),
		refuseEndpoint("nats on 0.0.0.0", "eventsinks", "EventSink", "nats-unspecified", natsSpec("nats://0.0.0.0:4222"), "unspecified"),
		refuseEndpoint("nats on [::1]", "eventsinks", "EventSink", "nats-loopback6", natsSpec("nats://[::1]:4222"), "loopback"),
		refuseEndpoint("git on a private address", "snapshotsinks", "SnapshotSink", "git-private", gitSpec("https://10.0.0.1/org/repo.git"), "private"),
		refuseEndpoint("git over ssh on the IPv6 metadata address", "snapshotsinks", "SnapshotSink", "git-metadata6", gitSpec("ssh://git@[fd00:ec2::254]/repo.git"), "cloud metadata"),
		refuseEndpoint("postgres on a CGNAT address", "databasesinks", "DatabaseSink", "postgres-cgnat", postgresSpec("postgres://100.64.0.1:5432/inventory"), "shared (CGNAT)"),
		refuseEndpoint("postgres through hostaddr on the metadata address", "databasesinks", "DatabaseSink", "postgres-hostaddr",
			postgresSpec("postgres://db.hostile.invalid:5432/inventory?hostaddr=169.254.169.254"), "cloud metadata"),
		refuseEndpoint("postgres with a loopback fallback host", "databasesinks", "DatabaseSink", "postgres-fallback",
			postgresSpec("postgres://db.hostile.invalid:5432/inventory?host=db.hostile.invalid,127.0.0.1"), "loopback"),
		{
			// Without strict field validation the last key wins: it must
			// be the one admission checks.
			name: "duplicate endpoint keys smuggling a loopback address",
			req: hostileRequest{path: "ns:eventsinks", body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"EventSink","metadata":{"name":"duplicate-endpoint"},` +
				`"spec":{"type":"webhook","endpoint":"https://hooks.hostile.invalid/k","webhook":{"signatureHeader":"X-Signature","maxAttempts":3},"endpoint":"http://127.0.0.1:9/hook"}}`)},
			code: invalid, want: []string{"spec.endpoint", "loopback"}, absent: "eventsinks/duplicate-endpoint",
		},
		{
			name: "sink endpoint changed to loopback by an update",
			req: hostileRequest{method: http.MethodPatch, path: "ns:eventsinks/known", contentType: "application/merge-patch+json",
				body: []byte(`{"spec":{"endpoint":"http://127.0.0.1:9/hook"}}`)},
			code: invalid, want: []string{"spec.endpoint", "loopback", "--allow-private-sink-endpoints"}, unchanged: []string{"eventsinks/known"},
		},
		{
			name: "sink type changed by an update",
			req: hostileRequest{method: http.MethodPatch, path: "ns:eventsinks/known", contentType: "application/merge-patch+json",
				body: []byte(`{"spec":{"type":"nats","endpoint":"nats://nats.hostile.invalid:4222","webhook":null,"nats":{"stream":"kollect"}}}`)},
			code: invalid, want: []string{"spec.type", "field is immutable"}, unchanged: []string{"eventsinks/known"},
		},

		// Configuration.
		refuse("sink type that does not exist", "eventsinks", kollectObj("EventSink", hmeta("type-ftp"), jobj{"type": "ftp", "endpoint": "ftp://files.hostile.invalid/"}),
			invalid, "spec.type", "Unsupported value"),
		refuse("webhook endpoint of another scheme", "eventsinks", kollectObj("EventSink", hmeta("scheme-gopher"), webhookSpec("gopher://hooks.hostile.invalid:70/1")),
			invalid, "spec.endpoint", "with scheme https:// or http://"),
		refuse("nats endpoint without a port", "eventsinks", kollectObj("EventSink", hmeta("nats-no-port"), natsSpec("nats://nats.hostile.invalid")),
			invalid, "spec.endpoint", "must name a port"),
		refuse("webhook endpoint on port 65536", "eventsinks", kollectObj("EventSink", hmeta("port-65536"), webhookSpec("https://hooks.hostile.invalid:65536/k")),
			invalid, "spec.endpoint"),
		refuse("nats stream with a dot", "eventsinks", kollectObj("EventSink", hmeta("nats-stream-dot"),
			jobj{"type": "nats", "endpoint": "nats://nats.hostile.invalid:4222", "nats": jobj{"stream": "other.stream"}}),
			invalid, "spec.nats.stream"),
		refuse("nats subject with a wildcard", "eventsinks", kollectObj("EventSink", hmeta("nats-subject-wildcard"),
			jobj{"type": "nats", "endpoint": "nats://nats.hostile.invalid:4222", "nats": jobj{"stream": "kollect", "subject": "kollect.>"}}),
			invalid, "spec.nats.subject", "wildcards"),
		refuse("nats stream name of 256 characters", "eventsinks", kollectObj("EventSink", hmeta("nats-stream-long"),
			jobj{"type": "nats", "endpoint": "nats://nats.hostile.invalid:4222", "nats": jobj{"stream": strings.Repeat("s", 256)}}),
			invalid, "spec.nats.stream", "may not be more than 255 bytes"),
		refuse("git branch that git refuses", "snapshotsinks", kollectObj("SnapshotSink", hmeta("git-branch"),
			jobj{"type": "git", "endpoint": "https://git.hostile.invalid/org/repo.git", "git": jobj{"branch": "../refs/heads/main.lock"}}),
			invalid, "spec.git.branch"),
		refuse("git path template that is absolute", "snapshotsinks", kollectObj("SnapshotSink", hmeta("git-absolute-path"),
			jobj{"type": "git", "endpoint": "https://git.hostile.invalid/org/repo.git", "git": jobj{"pathTemplate": "/.git/hooks/{inventory}"}}),
			invalid, "spec.git.pathTemplate", "must be a relative path"),
		refuse("git commit message of 1025 bytes", "snapshotsinks", kollectObj("SnapshotSink", hmeta("git-message-long"),
			jobj{"type": "git", "endpoint": "https://git.hostile.invalid/org/repo.git", "git": jobj{"commitMessage": strings.Repeat("c", 1025)}}),
			invalid, "spec.git.commitMessage", "may not be more than 1024 bytes"),
		refuse("git author email with a header injection", "snapshotsinks", kollectObj("SnapshotSink", hmeta("git-email"),
			jobj{"type": "git", "endpoint": "https://git.hostile.invalid/org/repo.git", "git": jobj{"authorEmail": "a@b.example\nSigned-off-by: root"}}),
			invalid, "spec.git.authorEmail"),
		refuse("postgres table with SQL", "databasesinks", kollectObj("DatabaseSink", hmeta("postgres-sql"),
			jobj{"type": "postgres", "endpoint": "postgres://db.hostile.invalid:5432/inventory", "postgres": jobj{"table": "items; DROP TABLE users; --"}}),
			invalid, "spec.postgres.table", "must be a SQL identifier"),
		refuse("postgres table of 56 characters", "databasesinks", kollectObj("DatabaseSink", hmeta("postgres-table-long"),
			jobj{"type": "postgres", "endpoint": "postgres://db.hostile.invalid:5432/inventory", "postgres": jobj{"table": strings.Repeat("t", 56)}}),
			invalid, "spec.postgres.table", "may not be more than 55 bytes"),
		refuse("postgres sink with neither endpoint nor Secret", "databasesinks", kollectObj("DatabaseSink", hmeta("postgres-nothing"), jobj{"type": "postgres"}),
			invalid, "spec.secretRef", "Required value"),
		refuse("secretRef naming another namespace's path", "eventsinks", kollectObj("EventSink", hmeta("secret-path"),
			with(webhookSpec("https://hooks.hostile.invalid/k"), "secretRef", jobj{"name": "../kube-system/admin-token"})),
			invalid, "spec.secretRef.name"),
		refuse("serialization format that does not exist", "snapshotsinks", kollectObj("SnapshotSink", hmeta("format-xml"),
			with(gitSpec("https://git.hostile.invalid/org/repo.git"), "serialization", jobj{"format": "xml"})),
			invalid, "spec.serialization.format", "Unsupported value"),
		refuse("deletion policy that does not exist", "databasesinks", kollectObj("DatabaseSink", hmeta("policy-purge"),
			with(postgresSpec("postgres://db.hostile.invalid:5432/inventory"), "deletionPolicy", "Purge")),
			invalid, "spec.deletionPolicy", "Unsupported value"),
		refuse("webhook timeout over a minute", "eventsinks", kollectObj("EventSink", hmeta("webhook-timeout"),
			jobj{"type": "webhook", "endpoint": "https://hooks.hostile.invalid/k", "webhook": jobj{"signatureHeader": "X-Signature", "timeout": "61s", "maxAttempts": 3}}),
			invalid, "spec.webhook.timeout", "must be at most 1m"),
		refuse("webhook of 21 attempts", "eventsinks", kollectObj("EventSink", hmeta("webhook-attempts"),
			jobj{"type": "webhook", "endpoint": "https://hooks.hostile.invalid/k", "webhook": jobj{"signatureHeader": "X-Signature", "maxAttempts": 21}}),
			invalid, "spec.webhook.maxAttempts", "between 1 and 20"),
		refuse("webhook signature header that is no header name", "eventsinks", kollectObj("EventSink", hmeta("webhook-header"),
			jobj{"type": "webhook", "endpoint": "https://hooks.hostile.invalid/k", "webhook": jobj{"signatureHeader": "X-Sig\r\nX-Injected: 1", "maxAttempts": 3}}),
			invalid, "spec.webhook.signatureHeader"),
	}
}

func kindCases() []hostileCase {
	const invalid = http.StatusUnprocessableEntity
	attrs := func(n int) []jobj {
		out := make([]jobj, n)
		for i := range out {
			out[i] = jobj{"name": fmt.Sprintf("a%d", i), "path": "{.metadata.name}"}
		}
		return out
	}
	sinkRefs := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = jobj{"name": fmt.Sprintf("sink-%d", i)}
		}
		return out
	}
	gks := make([]any, 101)
	for i := range gks {
		gks[i] = jobj{"group": "apps", "kind": fmt.Sprintf("Kind%d", i)}
	}
	return []hostileCase{
		// Profile.
		{
			name: "64 attributes, the most a Profile may have, are accepted",
			req:  hostileRequest{path: "ns:profiles", body: hostileJSON(profileObj("attributes-64", attrs(64)...))},
			code: http.StatusCreated,
			check: func(t *testing.T, _ context.Context, r hostileReply) {
				if a, _, _ := unstructured.NestedSlice(r.object(t).Object, "spec", "attributes"); len(a) != 64 {
					t.Errorf("%d attributes stored, want 64", len(a))
				}
			},
		},
		refuse("65 attributes", "profiles", profileObj("attributes-65", attrs(65)...), invalid, "spec.attributes", "must have at most 64 items"),
		refuse("attribute path of 4097 bytes", "profiles", profileObj("path-4097", jobj{"name": "a", "path": "{.a" + strings.Repeat(".b", 2046) + "}x"}),
			invalid, "spec.attributes[0].path", "may not be more than 4096 bytes"),
		refuse("NUL byte in an attribute name", "profiles", profileObj("name-nul", jobj{"name": "a\u0000b", "path": "{.data}"}),
			invalid, "spec.attributes[0].name"),
		refuse("duplicate attribute names", "profiles", profileObj("attributes-duplicate", jobj{"name": "a", "path": "{.data}"}, jobj{"name": "a", "path": "{.metadata}"}),
			invalid, "spec.attributes[1].name", "Duplicate value"),
		refuse("kind that is not CamelCase", "profiles", kollectObj("Profile", hmeta("kind-lowercase"),
			jobj{"targetGVK": jobj{"version": "v1", "kind": "configmap"}, "attributes": []any{jobj{"name": "a", "path": "{.data}"}}}),
			invalid, "spec.targetGVK.kind"),
		refuse("export mode that does not exist", "profiles", kollectObj("Profile", hmeta("mode-everything"),
			jobj{"targetGVK": jobj{"version": "v1", "kind": "ConfigMap"}, "attributes": []any{jobj{"name": "a", "path": "{.data}"}}, "export": jobj{"mode": "Everything"}}),
			invalid, "spec.export.mode", "Unsupported value"),
		refuse("prune pointer with a bad escape", "profiles", kollectObj("Profile", hmeta("prune-pointer"),
			jobj{"targetGVK": jobj{"version": "v1", "kind": "ConfigMap"}, "export": jobj{"mode": "Resource", "prune": jobj{"jsonPointers": []any{"/data/~2"}}}}),
			invalid, "spec.export.prune.jsonPointers[0]"),
		refuse("Secret collection with an opt-in that is not \"true\"", "profiles", kollectObj("Profile",
			jobj{"name": "secrets-yes", "namespace": hostileNS, "annotations": jobj{"kollect.dev/collect-secrets": "yes"}},
			jobj{"targetGVK": jobj{"version": "v1", "kind": "Secret"}, "attributes": []any{jobj{"name": "a", "path": "{.type}"}}}),
			invalid, "metadata.annotations[kollect.dev/collect-secrets]"),
		{
			name: "Profile kind changed by an update",
			req: hostileRequest{method: http.MethodPatch, path: "ns:profiles/known", contentType: "application/merge-patch+json",
				body: []byte(`{"spec":{"targetGVK":{"version":"v1","kind":"Pod"}}}`)},
			code: invalid, want: []string{"spec.targetGVK", "field is immutable"}, unchanged: []string{"profiles/known"},
		},

		// Target and ClusterTarget.
		refuse("Target without a Profile", "targets", kollectObj("Target", hmeta("no-profile"), jobj{}), invalid, "spec.profileRef.name", "Required value"),
		refuse("selector In without values", "targets", targetObj("in-no-values", jobj{"labelSelector": jobj{"matchExpressions": []any{jobj{"key": "app", "operator": "In"}}}}),
			invalid, "spec.labelSelector.matchExpressions[0].values"),
		refuse("selector operator that does not exist", "targets", targetObj("operator-explode", jobj{"labelSelector": jobj{"matchExpressions": []any{jobj{"key": "app", "operator": "Explode"}}}}),
			invalid, "spec.labelSelector.matchExpressions[0].operator"),
		refuse("selector key that is no label key", "targets", targetObj("selector-key", jobj{"labelSelector": jobj{"matchLabels": jobj{"bad key!": "v"}}}),
			invalid, "spec.labelSelector.matchLabels"),
		refuse("names with a path", "targets", targetObj("names-path", jobj{"names": []any{"../kube-system/x"}}), invalid, "spec.names[0]"),
		refuse("ClusterTarget Profile without a namespace", "clustertargets", kollectObj("ClusterTarget", cmeta("hostile-no-namespace"), jobj{"profileRef": jobj{"name": "known"}}),
			invalid, "spec.profileRef.namespace", "Required value"),
		refuse("ClusterTarget namespaces listed twice", "clustertargets", kollectObj("ClusterTarget", cmeta("hostile-duplicate-namespaces"),
			jobj{"profileRef": jobj{"namespace": hostileNS, "name": "known"}, "includeNamespaces": []any{"a", "a"}}),
			invalid, "spec.includeNamespaces[1]", "Duplicate value"),
		refuse("ClusterTarget namespace of 64 characters", "clustertargets", kollectObj("ClusterTarget", cmeta("hostile-namespace-64"),
			jobj{"profileRef": jobj{"namespace": hostileNS, "name": "known"}, "excludeNamespaces": []any{strings.Repeat("n", 64)}}),
			invalid, "spec.excludeNamespaces[0]", "must be no more than 63 characters"),

		// Inventory and ClusterInventory.
		refuse("21 sink references", "inventories", inventoryObj("sinks-21", jobj{"eventSinkRefs": sinkRefs(21)}),
			invalid, "spec.eventSinkRefs", "must have at most 20 sink references"),
		refuse("sink reference into another namespace", "inventories", inventoryObj("sink-namespace", jobj{"eventSinkRefs": []any{jobj{"name": "known", "namespace": "kube-system"}}}),
			invalid, "spec.eventSinkRefs[0].namespace", "only ClusterInventory references name a namespace"),
		refuse("the same sink referenced twice", "inventories", inventoryObj("sinks-duplicate", jobj{"eventSinkRefs": []any{jobj{"name": "known"}, jobj{"name": "known"}}}),
			invalid, "spec.eventSinkRefs[1].name", "Duplicate value"),
		refuse("interval over 24h", "inventories", inventoryObj("interval-25h", jobj{"exportMinInterval": "25h"}),
			invalid, "spec.exportMinInterval", "must be at most 24h"),
		refuse("interval under the Scope's floor", "inventories", inventoryObj("interval-floor", jobj{"exportMinInterval": "30s"}),
			invalid, "spec.exportMinInterval", "below the floor of 1m0s", "known"),
		refuse("ClusterInventory sink namespace that is no namespace name", "clusterinventories", kollectObj("ClusterInventory", cmeta("hostile-sink-namespace"), jobj{"sinkNamespace": "Bad_NS"}),
			invalid, "spec.sinkNamespace"),
		refuse("ClusterInventory target reference without a name", "clusterinventories", kollectObj("ClusterInventory", cmeta("hostile-target-ref"),
			jobj{"sinkNamespace": hostileNS, "targetRefs": []any{jobj{"name": ""}}}),
			invalid, "spec.targetRefs[0].name", "Required value"),

		// Scope and ClusterScope.
		refuse("101 allowed kinds", "scopes", kollectObj("Scope", hmeta("gvks-101"), jobj{"allowedGVKs": gks}), invalid, "spec.allowedGVKs", "must have at most 100 items"),
		refuse("allowed kind that is no kind", "scopes", kollectObj("Scope", hmeta("gvk-bad"), jobj{"allowedGVKs": []any{jobj{"group": "apps", "kind": "bad kind"}}}),
			invalid, "spec.allowedGVKs[0].kind"),
		refuse("Scope floor over 24h", "scopes", kollectObj("Scope", hmeta("floor-25h"), jobj{"minExportInterval": "25h"}), invalid, "spec.minExportInterval", "must be at most 24h"),
		refuse("Scope sink listed twice", "scopes", kollectObj("Scope", hmeta("sinks-twice"), jobj{"snapshotSinkRefs": []any{"a", "a"}}), invalid, "spec.snapshotSinkRefs[1]", "Duplicate value"),
		refuse("ClusterScope namespace both allowed and denied", "clusterscopes", kollectObj("ClusterScope", cmeta("hostile-allowed-denied"),
			jobj{"allowedNamespaces": []any{"team-a"}, "deniedNamespaces": []any{"team-a"}}),
			invalid, "spec.deniedNamespaces[0]", "must not also be in allowedNamespaces"),
		refuse("ClusterScope sink reference without a namespace", "clusterscopes", kollectObj("ClusterScope", cmeta("hostile-sink-ref"), jobj{"eventSinkRefs": []any{"known"}}),
			invalid, "spec.eventSinkRefs[0]", `must be \"namespace/name\"`),
	}
}

func (h *hostile) queryCases() []hostileCase {
	const badRequest = http.StatusBadRequest
	return []hostileCase{
		{
			name: "list with a malformed label selector",
			req:  hostileRequest{method: http.MethodGet, path: "ns:targets", query: "labelSelector=app+in+(web"},
			code: badRequest, want: []string{"unable to parse requirement"},
		},
		{
			name: "list with a malformed field selector",
			req:  hostileRequest{method: http.MethodGet, path: "ns:targets", query: "fieldSelector=metadata.name%3D%3Da%3D%3Db"},
			code: badRequest, want: []string{"invalid field selector"},
		},
		{
			name: "list asking for an exact resourceVersion without one",
			req:  hostileRequest{method: http.MethodGet, path: "ns:targets", query: "resourceVersionMatch=Exact"},
			code: http.StatusUnprocessableEntity, want: []string{"resourceVersionMatch"},
		},
		{
			name: "get at a resourceVersion that is not a number",
			req:  hostileRequest{method: http.MethodGet, path: "ns:scopes/known", query: "resourceVersion=abc"},
			code: badRequest, want: []string{"resourceVersion"},
		},
		{
			name: "watch with a timeout that is not a number",
			req:  hostileRequest{method: http.MethodGet, path: "ns:targets", query: "watch=true&timeoutSeconds=forever"},
			code: badRequest, want: []string{`parsing \"forever\"`},
		},
		{
			name: "field validation of a mode that does not exist",
			req:  hostileRequest{path: "ns:scopes", query: "fieldValidation=Explode", body: hostileJSON(scopeObj(hmeta("field-validation-explode")))},
			code: http.StatusUnprocessableEntity, want: []string{"fieldValidation", "Unsupported value"}, absent: "scopes/field-validation-explode",
		},
		{
			name: "unknown field in a list entry, strict field validation",
			req: hostileRequest{path: "ns:profiles", query: "fieldValidation=Strict",
				body: hostileJSON(profileObj("unknown-in-list", jobj{"name": "a", "path": "{.data}", "command": "rm -rf /"}))},
			code: badRequest, want: []string{`unknown field \"spec.attributes[0].command\"`}, absent: "profiles/unknown-in-list",
		},
		{
			name: "unknown field, warn field validation",
			req: hostileRequest{path: "ns:profiles", query: "fieldValidation=Warn",
				body: hostileJSON(func() jobj { o := profileObj("unknown-warn"); o["spec"].(jobj)["runAs"] = "root"; return o }())},
			code: http.StatusCreated,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				if w := r.header.Get("Warning"); !strings.Contains(w, "unknown field") || !strings.Contains(w, "spec.runAs") {
					t.Errorf("no warning about the unknown field: %q", w)
				}
				if _, found, _ := unstructured.NestedFieldNoCopy(h.get(t, ctx, "profiles/unknown-warn").Object, "spec", "runAs"); found {
					t.Errorf("the unknown field was stored")
				}
			},
		},
		{
			name: "an empty body",
			req:  hostileRequest{path: "ns:scopes"},
			code: badRequest, want: []string{"unexpected end of JSON input"},
		},
		{
			name: "a version of the group that does not exist",
			req:  hostileRequest{path: "ns:scopes", body: []byte(`{"apiVersion":"kollect.dev/v2","kind":"Scope","metadata":{"name":"v2"},"spec":{}}`)},
			code: badRequest, want: []string{"kollect.dev/v2"}, absent: "scopes/v2",
		},
		{
			name: "a Target posted to profiles",
			req:  hostileRequest{path: "ns:profiles", body: hostileJSON(targetObj("target-as-profile", nil))},
			code: badRequest, want: []string{"cannot be handled as a Profile"}, absent: "profiles/target-as-profile",
		},
		{
			name: "spec of the wrong type",
			req:  hostileRequest{path: "ns:targets", body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Target","metadata":{"name":"spec-string"},"spec":"collect everything"}`)},
			code: badRequest, want: []string{"spec"}, absent: "targets/spec-string",
		},
		{
			name: "labels as a list",
			req:  hostileRequest{path: "ns:scopes", body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"labels-list","labels":["a","b"]},"spec":{}}`)},
			code: badRequest, want: []string{"labels"}, absent: "scopes/labels-list",
		},
		{
			name: "YAML nested 100,000 deep",
			req: hostileRequest{path: "ns:scopes", contentType: "application/yaml",
				body: []byte("apiVersion: kollect.dev/v1alpha1\nkind: Scope\nmetadata: {name: yaml-deep}\nspec: {}\nhostile: " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "\n")},
			code: badRequest, want: []string{"exceeded max depth of 10000"}, absent: "scopes/yaml-deep",
		},
		{
			name: "two JSON documents in one body",
			req: hostileRequest{path: "ns:scopes",
				body: []byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"two-documents"},"spec":{}}{"apiVersion":"kollect.dev/v1alpha1","kind":"Scope","metadata":{"name":"second-document"},"spec":{}}`)},
			code: badRequest, want: []string{"after top-level value"}, absent: "scopes/two-documents",
			check: func(t *testing.T, ctx context.Context, _ hostileReply) {
				h.expectAbsent(t, ctx, "scopes/second-document")
			},
		},
	}
}

func (h *hostile) identityCases() []hostileCase {
	const forbidden = http.StatusForbidden
	return []hostileCase{
		{
			name: "Scope created by a namespace editor",
			req:  hostileRequest{path: "ns:scopes", client: h.forger, body: hostileJSON(kollectObj("Scope", hmeta("editor-scope"), jobj{"maxItems": 1000000000}))},
			code: forbidden, want: []string{"scopes"}, absent: "scopes/editor-scope",
		},
		{
			name: "ClusterScope created by a namespace editor",
			req:  hostileRequest{path: "clusterscopes", client: h.forger, body: hostileJSON(kollectObj("ClusterScope", cmeta("hostile-editor"), jobj{}))},
			code: forbidden, want: []string{"clusterscopes"}, absent: "/clusterscopes/hostile-editor",
		},
		{
			name: "Scope raised by a namespace editor",
			req: hostileRequest{method: http.MethodPatch, path: "ns:scopes/known", contentType: "application/merge-patch+json", client: h.forger,
				body: []byte(`{"spec":{"maxItems":1000000000,"minExportInterval":"0s"}}`)},
			code: forbidden, want: []string{`cannot patch resource \"scopes\"`}, unchanged: []string{"scopes/known"},
		},
		{
			name: "a namespace editor impersonating the admin",
			req: hostileRequest{path: "ns:scopes", client: h.forger, header: map[string]string{"Impersonate-User": "system:admin", "Impersonate-Group": "system:masters"},
				body: hostileJSON(scopeObj(hmeta("impersonated")))},
			code: forbidden, want: []string{"impersonate"}, absent: "scopes/impersonated",
		},
		{
			name: "identity headers straight to kollect-apiserver with a user's token",
			req: hostileRequest{path: "ns:targets", client: h.forgerDirect, base: env.Kollect.URL() + "/apis/kollect.dev/v1alpha1/",
				header: map[string]string{"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"},
				body:   hostileJSON(targetObj("forged-direct-token", nil))},
			code: http.StatusCreated,
			check: func(t *testing.T, ctx context.Context, r hostileReply) {
				expectServerRequester(t, r.object(t), h.forgerName)
			},
		},
	}
}

// expectNoneNamed checks that no object of resource in hostileNS has a name
// starting with prefix.
func (h *hostile) expectNoneNamed(t *testing.T, ctx context.Context, resource, prefix string) {
	t.Helper()
	r := h.do(t, ctx, hostileRequest{method: http.MethodGet, path: "ns:" + resource})
	if r.code != http.StatusOK {
		t.Fatalf("listing %s: HTTP %d:\n%.1000s", resource, r.code, r.body)
	}
	list := &unstructured.UnstructuredList{}
	if err := list.UnmarshalJSON(r.body); err != nil {
		t.Fatal(err)
	}
	for _, u := range list.Items {
		if strings.HasPrefix(u.GetName(), prefix) {
			t.Errorf("%s %s was stored", resource, u.GetName())
		}
	}
}
