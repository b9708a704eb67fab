// Package extract turns a collected object into the content of an
// InventoryItem as a Profile describes it, and computes the item's content
// hash and name. It is pure: no clients, no caches, no clocks, so that the
// collector and its tests agree on every byte.
//
// Extraction works on the versioned Profile (what the collector's informers
// deliver, with the server's defaults applied) and on the unstructured form
// of the object. It never modifies the object it is given: informer caches
// share it.
package extract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/expression"
)

const (
	// LastAppliedAnnotation is the annotation kubectl apply keeps the whole
	// previous configuration in (Secret values included).
	LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"
	// DefaultAttributeTimeout bounds the evaluation of one attribute. The
	// runtime cost limit of CEL bounds the work, but cel-go's cost tracking
	// makes long loops quadratic in time, so wall time is bounded as well.
	DefaultAttributeTimeout = time.Second
)

// ErrSecretsNotAllowed is returned for a Profile that collects Secrets
// without the kollect.dev/collect-secrets: "true" opt-in. Validation rejects
// such Profiles; the collector refuses them again in case one slipped in
// (created before the rule, or restored from a backup).
var ErrSecretsNotAllowed = errors.New(`collecting Secrets needs the Profile annotation ` + kollect.AnnotationCollectSecrets + `: "true"`)

// Content is what an item carries besides its source: the Profile's
// attributes in Attributes mode, or the pruned object in Resource mode.
type Content struct {
	Attributes map[string]kollect.Value
	Object     *kollect.Value
	// Selectable name the attributes field selectors see (the collector's
	// choice, not extraction's): part of the content its hash covers.
	Selectable []string
}

// attribute is one compiled attribute of a Profile.
type attribute struct {
	name     string
	expr     *expression.Expression
	optional bool
}

// Extractor is a compiled Profile. It is safe for concurrent use.
type Extractor struct {
	resource   bool
	attributes []attribute

	include            v1alpha1.ResourceInclude
	pruneManagedFields bool
	pruneLastApplied   bool
	pointers           [][]string
	scrubKeys          sets.Set[string]

	// secrets is true when the Profile collects core Secrets; their values
	// are redacted unless exportSecretValues (Resource mode only).
	secrets            bool
	exportSecretValues bool

	// Timeout bounds the evaluation of each attribute.
	Timeout time.Duration
}

// IsSecretKind reports whether a group and kind name core Secrets.
func IsSecretKind(group, kind string) bool { return group == "" && kind == "Secret" }

// New compiles a Profile. Errors say which attribute is wrong; validation
// catches them at admission, so they only occur for objects stored before a
// rule existed.
func New(p *v1alpha1.Profile) (*Extractor, error) {
	e := &Extractor{Timeout: DefaultAttributeTimeout}
	gvk := p.Spec.TargetGVK
	if IsSecretKind(gvk.Group, gvk.Kind) {
		if p.Annotations[kollect.AnnotationCollectSecrets] != "true" {
			return nil, ErrSecretsNotAllowed
		}
		e.secrets = true
	}
	export := p.Spec.Export
	switch export.Mode {
	case v1alpha1.ExportModeResource:
		e.resource = true
		e.exportSecretValues = p.Annotations[kollect.AnnotationExportSecretValues] == "true"
		e.include = export.Include
		if e.include == "" {
			e.include = v1alpha1.IncludeSpecAndStatus
		}
		// Absent prune options take the API defaults: both true.
		e.pruneManagedFields, e.pruneLastApplied = true, true
		if prune := export.Prune; prune != nil {
			e.pruneManagedFields = prune.ManagedFields == nil || *prune.ManagedFields
			e.pruneLastApplied = prune.LastAppliedAnnotation == nil || *prune.LastAppliedAnnotation
			for _, ptr := range prune.JSONPointers {
				tokens, err := parsePointer(ptr)
				if err != nil {
					return nil, fmt.Errorf("spec.export.prune.jsonPointers: %q: %w", ptr, err)
				}
				e.pointers = append(e.pointers, tokens)
			}
			if len(prune.ScrubKeys) > 0 {
				e.scrubKeys = sets.New(prune.ScrubKeys...)
			}
		}
	case v1alpha1.ExportModeAttributes, "":
		if len(p.Spec.Attributes) == 0 {
			return nil, errors.New("spec.attributes: at least one attribute is required in Attributes mode")
		}
		for i, a := range p.Spec.Attributes {
			expr, err := expression.Compile(a.Path)
			if err != nil {
				return nil, fmt.Errorf("spec.attributes[%d].path: %w", i, err)
			}
			e.attributes = append(e.attributes, attribute{name: a.Name, expr: expr, optional: a.Optional})
		}
	default:
		return nil, fmt.Errorf("spec.export.mode: unknown mode %q", export.Mode)
	}
	return e, nil
}

// ResourceMode reports whether items carry the pruned object.
func (e *Extractor) ResourceMode() bool { return e.resource }

// KeepsManagedFields reports whether extraction needs metadata.managedFields,
// which the collector's informers otherwise drop.
func (e *Extractor) KeepsManagedFields() bool { return e.resource && !e.pruneManagedFields }

// KeepsLastApplied reports whether extraction needs the last-applied
// annotation, which the collector's informers otherwise drop.
func (e *Extractor) KeepsLastApplied() bool {
	return e.resource && !e.pruneLastApplied && !e.redactsSecrets()
}

func (e *Extractor) redactsSecrets() bool {
	return e.secrets && !(e.resource && e.exportSecretValues)
}

// Extract computes the content of the item for obj, the unstructured form of
// a collected object. An error fails the object: a required attribute that
// matches nothing, an evaluation error, or a value too large to store.
func (e *Extractor) Extract(ctx context.Context, obj map[string]any) (Content, error) {
	if obj == nil {
		return Content{}, errors.New("no object")
	}
	// Whatever the Profile says, the values of a Secret leave only with
	// both opt-ins, and the last-applied annotation would leak them.
	if e.redactsSecrets() || (!e.secrets && isSecretObject(obj)) {
		obj = redactSecret(obj)
	}
	if e.resource {
		return e.extractResource(obj)
	}
	return e.extractAttributes(ctx, obj)
}

func (e *Extractor) extractAttributes(ctx context.Context, obj map[string]any) (Content, error) {
	attrs := make(map[string]kollect.Value, len(e.attributes))
	for _, a := range e.attributes {
		raw, found, err := e.evaluate(ctx, a.expr, obj)
		if err != nil {
			return Content{}, fmt.Errorf("attribute %q (%s): %v", a.name, a.expr, err)
		}
		if !found {
			if a.optional {
				continue
			}
			return Content{}, fmt.Errorf("required attribute %q (%s) matched nothing", a.name, a.expr)
		}
		attrs[a.name] = kollect.Value{Raw: raw}
	}
	return Content{Attributes: attrs}, nil
}

// evaluate is an attribute's value as JSON.
func (e *Extractor) evaluate(ctx context.Context, expr *expression.Expression, obj map[string]any) ([]byte, bool, error) {
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = DefaultAttributeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, found, err := expr.EvaluateJSON(ctx, obj)
	if err != nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, false, fmt.Errorf("evaluation took longer than %s", timeout)
	}
	return raw, found, err
}

func (e *Extractor) extractResource(obj map[string]any) (Content, error) {
	out := make(map[string]any, len(obj))
	for key, value := range obj {
		if keepTopLevel(e.include, key) {
			out[key] = runtime.DeepCopyJSONValue(value)
		}
	}
	if meta, ok := out["metadata"].(map[string]any); ok {
		// The item's source carries the resourceVersion; keeping it in the
		// object would rewrite the item on every change of the source,
		// including changes to parts the Profile does not keep.
		delete(meta, "resourceVersion")
		if e.pruneManagedFields {
			delete(meta, "managedFields")
		}
		if e.pruneLastApplied {
			deleteAnnotation(meta, LastAppliedAnnotation)
		}
	}
	for _, tokens := range e.pointers {
		removePointer(out, tokens)
	}
	if e.scrubKeys.Len() > 0 {
		scrub(out, e.scrubKeys)
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return Content{}, fmt.Errorf("the object cannot be encoded as JSON: %v", err)
	}
	if len(raw) > expression.MaxObjectBytes {
		return Content{}, fmt.Errorf("the pruned object is larger than %d MiB of JSON", expression.MaxObjectBytes>>20)
	}
	return Content{Object: &kollect.Value{Raw: raw}}, nil
}

// keepTopLevel says whether Resource mode keeps a top-level field.
func keepTopLevel(include v1alpha1.ResourceInclude, key string) bool {
	switch key {
	case "apiVersion", "kind", "metadata":
		return true
	case "spec":
		return include == v1alpha1.IncludeSpec || include == v1alpha1.IncludeSpecAndStatus || include == v1alpha1.IncludeAll
	case "status":
		return include == v1alpha1.IncludeStatus || include == v1alpha1.IncludeSpecAndStatus || include == v1alpha1.IncludeAll
	default:
		return include == v1alpha1.IncludeAll
	}
}

func isSecretObject(obj map[string]any) bool {
	kind, _ := obj["kind"].(string)
	apiVersion, _ := obj["apiVersion"].(string)
	return kind == "Secret" && apiVersion == "v1"
}

// redactSecret returns a copy of a Secret whose data and stringData values
// are plumbing.Redacted (the keys stay: which keys exist is useful inventory) and
// without the last-applied annotation. The input is not modified.
func redactSecret(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	for _, field := range []string{"data", "stringData"} {
		values, ok := obj[field].(map[string]any)
		if !ok {
			continue
		}
		redacted := make(map[string]any, len(values))
		for k := range values {
			redacted[k] = plumbing.Redacted
		}
		out[field] = redacted
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		if annotations, ok := meta["annotations"].(map[string]any); ok {
			if _, ok := annotations[LastAppliedAnnotation]; ok {
				metaCopy := make(map[string]any, len(meta))
				for k, v := range meta {
					metaCopy[k] = v
				}
				annCopy := make(map[string]any, len(annotations))
				for k, v := range annotations {
					annCopy[k] = v
				}
				metaCopy["annotations"] = annCopy
				deleteAnnotation(metaCopy, LastAppliedAnnotation)
				out["metadata"] = metaCopy
			}
		}
	}
	return out
}

// deleteAnnotation removes an annotation from metadata it owns, and the
// annotations map when it becomes empty.
func deleteAnnotation(meta map[string]any, name string) {
	annotations, ok := meta["annotations"].(map[string]any)
	if !ok {
		return
	}
	delete(annotations, name)
	if len(annotations) == 0 {
		delete(meta, "annotations")
	}
}

// scrub replaces, at any depth, the values of the given map keys.
func scrub(v any, keys sets.Set[string]) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			if keys.Has(k) {
				t[k] = plumbing.Redacted
				continue
			}
			scrub(child, keys)
		}
	case []any:
		for _, child := range t {
			scrub(child, keys)
		}
	}
}

// parsePointer splits an RFC 6901 JSON pointer into unescaped tokens.
func parsePointer(ptr string) ([]string, error) {
	if ptr == "" {
		return nil, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, errors.New(`a JSON pointer starts with "/"`)
	}
	tokens := strings.Split(ptr[1:], "/")
	for i, t := range tokens {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, errors.New(`"~" must be escaped as "~0" ("/" as "~1")`)
			}
		}
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return tokens, nil
}

// removePointer removes what a pointer designates; a pointer that matches
// nothing removes nothing. The empty pointer (the whole object) is ignored.
func removePointer(root map[string]any, tokens []string) {
	if len(tokens) == 0 {
		return
	}
	var parent any = root
	for _, token := range tokens[:len(tokens)-1] {
		next, ok := child(parent, token)
		if !ok {
			return
		}
		parent = next
	}
	last := tokens[len(tokens)-1]
	switch p := parent.(type) {
	case map[string]any:
		delete(p, last)
	case []any:
		// Arrays cannot shrink in place: replace the array in its parent.
		i, ok := arrayIndex(last, len(p))
		if !ok {
			return
		}
		shorter := append(append(make([]any, 0, len(p)-1), p[:i]...), p[i+1:]...)
		setChild(root, tokens[:len(tokens)-1], shorter)
	}
}

func child(v any, token string) (any, bool) {
	switch t := v.(type) {
	case map[string]any:
		c, ok := t[token]
		return c, ok
	case []any:
		i, ok := arrayIndex(token, len(t))
		if !ok {
			return nil, false
		}
		return t[i], true
	}
	return nil, false
}

// setChild replaces the value a non-empty pointer designates; it exists.
func setChild(root map[string]any, tokens []string, value any) {
	var parent any = root
	for _, token := range tokens[:len(tokens)-1] {
		parent, _ = child(parent, token)
	}
	last := tokens[len(tokens)-1]
	switch p := parent.(type) {
	case map[string]any:
		p[last] = value
	case []any:
		if i, ok := arrayIndex(last, len(p)); ok {
			p[i] = value
		}
	}
}

// arrayIndex parses an RFC 6901 array index: digits without leading zeros.
func arrayIndex(token string, length int) (int, bool) {
	if token == "" || len(token) > 9 || (len(token) > 1 && token[0] == '0') {
		return 0, false
	}
	i := 0
	for _, c := range token {
		if c < '0' || c > '9' {
			return 0, false
		}
		i = i*10 + int(c-'0')
	}
	return i, i < length
}
