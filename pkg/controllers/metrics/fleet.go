package metrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	// FleetReplicas is the number of live replicas this replica sees: the
	// ones member clusters are spread over.
	FleetReplicas = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "fleet_replicas",
		Help:           "Live kollect-apiserver replicas this replica sees (their kollect-replica-* Leases renewed within the lease duration); member clusters are spread over them.",
		StabilityLevel: metrics.ALPHA,
	})

	// FleetMembersOwned is the number of member clusters this replica
	// collects: it holds their Leases.
	FleetMembersOwned = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "fleet_members_owned",
		Help:           "Member clusters this replica collects (it holds their kollect-member-* Lease).",
		StabilityLevel: metrics.ALPHA,
	})

	// FleetMemberReachable is 1 for a member this replica collects whose
	// last probe answered, 0 for one that did not; members of other
	// replicas have no series here.
	FleetMemberReachable = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "fleet_member_reachable",
		Help:           "1 when the last probe of a member cluster this replica collects answered, else 0.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"member"})

	// FleetMemberLastSync is when a member this replica collects last
	// answered a probe.
	FleetMemberLastSync = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "fleet_member_last_sync_timestamp_seconds",
		Help:           "Unix time of the last probe a member cluster this replica collects answered.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"member"})
)

var registerFleetOnce sync.Once

// RegisterFleet adds the fleet metrics to the legacy registry.
func RegisterFleet() {
	Register()
	registerFleetOnce.Do(func() {
		legacyregistry.MustRegister(FleetReplicas, FleetMembersOwned, FleetMemberReachable, FleetMemberLastSync)
	})
}
