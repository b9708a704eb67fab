package source

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// An Object is its own metav1.Object: the informer and its reflector ask
// meta.Accessor for the key and resourceVersion of each object several
// times per event, and an accessor built on each call (a metav1.ObjectMeta)
// was a kilobyte of garbage per object. An Object is never changed once
// decoded: the setters, which informers never call, do nothing; the
// getters of what is not kept answer as for an object without it.

func (o *Object) GetNamespace() string                          { return o.namespace.Value() }
func (o *Object) SetNamespace(string)                           {}
func (o *Object) GetName() string                               { return o.name }
func (o *Object) SetName(string)                                {}
func (o *Object) GetGenerateName() string                       { return "" }
func (o *Object) SetGenerateName(string)                        {}
func (o *Object) GetUID() types.UID                             { return o.uid }
func (o *Object) SetUID(types.UID)                              {}
func (o *Object) GetResourceVersion() string                    { return o.resourceVersion }
func (o *Object) SetResourceVersion(string)                     {}
func (o *Object) GetGeneration() int64                          { return 0 }
func (o *Object) SetGeneration(int64)                           {}
func (o *Object) GetSelfLink() string                           { return "" }
func (o *Object) SetSelfLink(string)                            {}
func (o *Object) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (o *Object) SetCreationTimestamp(metav1.Time)              {}
func (o *Object) GetDeletionTimestamp() *metav1.Time            { return nil }
func (o *Object) SetDeletionTimestamp(*metav1.Time)             {}
func (o *Object) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (o *Object) SetDeletionGracePeriodSeconds(*int64)          {}
func (o *Object) GetAnnotations() map[string]string             { return o.annotations }
func (o *Object) SetAnnotations(map[string]string)              {}
func (o *Object) GetFinalizers() []string                       { return nil }
func (o *Object) SetFinalizers([]string)                        {}
func (o *Object) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (o *Object) SetOwnerReferences([]metav1.OwnerReference)    {}
func (o *Object) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (o *Object) SetManagedFields([]metav1.ManagedFieldsEntry)  {}
func (o *Object) SetLabels(map[string]string)                   {}

// GetLabels copies the labels into a map; matching uses Labels.
func (o *Object) GetLabels() map[string]string {
	if len(o.labels) == 0 {
		return nil
	}
	m := make(map[string]string, len(o.labels))
	for _, p := range o.labels {
		m[p.key.Value()] = p.value.Value()
	}
	return m
}
