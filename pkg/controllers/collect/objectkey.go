package collect

import (
	"fmt"
	"unique"
)

// queuedObject is an objectKey as the object queue holds it: a walk queues
// every object of a target at once, and the queue's sets and metrics keep
// their size after draining, so its keys are interned handles (32 bytes
// instead of 72).
type queuedObject struct {
	target    unique.Handle[targetKey]
	namespace unique.Handle[string]
	name      string
}

func (k objectKey) queued() queuedObject {
	return queuedObject{target: unique.Make(k.target), namespace: unique.Make(k.namespace), name: k.name}
}

func (q queuedObject) key() objectKey {
	return objectKey{target: q.target.Value(), namespace: q.namespace.Value(), name: q.name}
}

// String is for logs.
func (q queuedObject) String() string {
	k := q.key()
	return fmt.Sprintf("%s: %s", k.target, objectKeyOf(k.namespace, k.name))
}
