package plumbing

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"

	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// Limits are a client's requests per second and burst.
type Limits struct {
	QPS   float32
	Burst int
}

// Clients are a controller's two clients: one for the host cluster and one
// for this server's own kinds, through the loopback configuration.
type Clients struct {
	// HostConfig is the host configuration the Kube client uses, for
	// clients of other shapes.
	HostConfig *rest.Config
	Kube       kubernetes.Interface
	Kollect    versioned.Interface
}

// NewClients builds the clients from copies of host, which keeps its own
// limits when it sets them (client-go's default of 5 per second is far
// too low for a controller's Events and discovery beside its informers),
// and of loopback, which always gets loopbackLimits.
func NewClients(host *rest.Config, hostLimits Limits, loopback *rest.Config, loopbackLimits Limits) (Clients, error) {
	host = rest.CopyConfig(host)
	if host.QPS == 0 {
		host.QPS, host.Burst = hostLimits.QPS, hostLimits.Burst
	}
	kube, err := kubernetes.NewForConfig(host)
	if err != nil {
		return Clients{}, err
	}
	loopback = rest.CopyConfig(loopback)
	loopback.QPS, loopback.Burst = loopbackLimits.QPS, loopbackLimits.Burst
	kollect, err := versioned.NewForConfig(loopback)
	if err != nil {
		return Clients{}, err
	}
	return Clients{HostConfig: host, Kube: kube, Kollect: kollect}, nil
}

// NewQueue is a work queue with client-go's default controller rate
// limiter (exponential per key, overall bucket), named for its metrics.
func NewQueue[K comparable](name string) workqueue.TypedRateLimitingInterface[K] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[K](),
		workqueue.TypedRateLimitingQueueConfig[K]{Name: name})
}
