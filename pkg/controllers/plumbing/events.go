package plumbing

import (
	"context"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
)

// MaxEventNote is the longest note of an events.k8s.io Event (1 KiB).
const MaxEventNote = 1000

// EventRecorder posts Warning Events about Kollect objects in the host
// cluster, where `kubectl describe` finds them. Events about a
// cluster-scoped object go to namespace default, as Kubernetes does.
type EventRecorder struct {
	broadcaster events.EventBroadcaster
	recorder    events.EventRecorder
}

// NewEventRecorder builds a recorder that posts through client as the
// reporting controller; nothing is posted before Start.
func NewEventRecorder(client kubernetes.Interface, controller string) *EventRecorder {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	// Events regard an ObjectReference, which needs no scheme to resolve.
	return &EventRecorder{broadcaster: b, recorder: b.NewRecorder(clientgoscheme.Scheme, controller)}
}

// Start posts the Events recorded from now until ctx is done.
func (r *EventRecorder) Start(ctx context.Context) error {
	return r.broadcaster.StartRecordingToSinkWithContext(ctx)
}

// Shutdown stops the recorder and drops the Events not yet posted.
func (r *EventRecorder) Shutdown() { r.broadcaster.Shutdown() }

// Warn posts a Warning Event; a longer note is cut to MaxEventNote bytes.
func (r *EventRecorder) Warn(regarding *corev1.ObjectReference, reason, action, note string) {
	r.recorder.Eventf(regarding, nil, corev1.EventTypeWarning, reason, action, "%s", Truncate(strings.ToValidUTF8(note, ""), MaxEventNote))
}

// Truncate cuts s to at most n bytes, on a character boundary.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
