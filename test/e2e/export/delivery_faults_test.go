package export

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// deliveryFault is one row of the fault matrix.
type deliveryFault struct {
	// ns is the case's namespace, and its name.
	ns   string
	opts rigOptions
	// begin starts the fault; the first round of changes follows at once.
	begin func(ctx context.Context, t *testing.T, r *rig)
	// seen tells when the exporter has met the fault: the second round of
	// changes is made after it, while the exporter cannot deliver.
	seen func(ctx context.Context, r *rig) (bool, string)
	// during runs between seen and the second round (optional).
	during func(ctx context.Context, t *testing.T, r *rig)
	// end repairs the fault.
	end func(ctx context.Context, t *testing.T, r *rig)
	// check asserts, once every sink converged, that the fault was what it
	// claims to be (optional).
	check func(ctx context.Context, t *testing.T, r *rig)
	// resyncs: the fault may start resyncs on event sinks: a failed
	// delivery may have partly landed, and a sink spec change may name
	// another destination, so the exporter restates the live set (by
	// design, pkg/controllers/export). Where no delivery fails (a revoked
	// grant, client rebuilds, another sink down) what was owed must
	// arrive as changes, without a resync.
	resyncs bool
}

// TestDeliveryFaults is issue 11's acceptance point 1 on one cluster: for
// each fault, changes of every kind (creates, updates, deletions, objects
// leaving the selector) are made while the fault holds; once it is
// repaired, the events of the NATS stream and of the webhook folded by
// the reference consumer (eventfold), and the Postgres rows, equal the
// live item set, every resync complete with the checksum it announced,
// none where no delivery failed, and every duplicate a re-delivery of an
// id already seen. Faults:
// receiver 4xx, 5xx and timeouts; NATS server restart; Postgres restart;
// the sinks edited to new endpoints with the same data behind; sink
// clients rebuilt every 2s (--sink-client-max-age); the requester's grant
// (list on the items, use on the sinks) revoked, then restored.
func TestDeliveryFaults(t *testing.T) {
	for _, f := range deliveryFaults() {
		t.Run(f.ns, func(t *testing.T) {
			ctx := testContext(t, 3*time.Minute)
			r := newRig(ctx, t, f.ns, f.opts)
			base := r.stats()
			f.begin(ctx, t, r)
			r.churn(ctx, t)
			eventually(ctx, t, "the exporter meets the fault", func(ctx context.Context) (bool, string) { return f.seen(ctx, r) })
			if f.during != nil {
				f.during(ctx, t, r)
			}
			r.churn(ctx, t)
			// Let the exporter run into the fault with these changes too.
			time.Sleep(2 * watchdog)
			f.end(ctx, t, r)
			r.converge(ctx, t, "after the fault")
			if f.resyncs {
				base = nil
			}
			r.verify(ctx, t, base)
			if f.check != nil {
				f.check(ctx, t, r)
			}
		})
	}
}

func deliveryFaults() []deliveryFault {
	heal := func(_ context.Context, _ *testing.T, r *rig) { r.hook.Heal() }
	hookFailing := func(ctx context.Context, r *rig) (bool, string) {
		return r.failing(ctx, v1alpha1.SinkFamilyEvent, rigHook, "")
	}
	webhookFault := func(ns string, begin func(r *rig)) deliveryFault {
		return deliveryFault{ns: ns, resyncs: true, begin: func(_ context.Context, _ *testing.T, r *rig) { begin(r) }, seen: hookFailing, end: heal,
			check: func(_ context.Context, t *testing.T, r *rig) {
				_, posts := r.relay.counts()
				if posts <= len(r.relay.accepted()) {
					t.Errorf("the receiver refused no delivery (%d POSTs, %d accepted): the fault never happened", posts, len(r.relay.accepted()))
				}
			}}
	}

	// The sink edit: state shared by its steps.
	var (
		natsFwd        *forwarder
		relayPostsEdit int
	)
	// The client rebuilds: connection counts before the changes.
	var natsConns0, relayConns0 int
	// Revoked grants: what the sinks had received when the exporter
	// stopped.
	var frozen delivered
	var pgStopped bool

	return []deliveryFault{
		webhookFault("delivery-webhook-4xx", func(r *rig) { r.hook.Fail(http.StatusBadRequest) }),
		webhookFault("delivery-webhook-5xx", func(r *rig) { r.hook.Fail(http.StatusInternalServerError) }),
		webhookFault("delivery-webhook-timeout", func(r *rig) { r.hook.Hang() }),
		{
			ns:      "delivery-nats-restart",
			opts:    rigOptions{privateNATS: true},
			resyncs: true,
			begin:   func(_ context.Context, t *testing.T, r *rig) { must(t, r.natsSrv.stop(), "stopping nats-server") },
			seen: func(ctx context.Context, r *rig) (bool, string) {
				return r.failing(ctx, v1alpha1.SinkFamilyEvent, rigStream, "")
			},
			end: func(ctx context.Context, t *testing.T, r *rig) {
				must(t, r.natsSrv.start(ctx), "starting nats-server again")
			},
		},
		{
			ns: "delivery-postgres-restart",
			begin: func(_ context.Context, t *testing.T, _ *rig) {
				noInheritedFDs() // the restarted server must not hold them
				postgresCtl(t, "stop")
				pgStopped = true
				// A case failing before end must not leave the tests after
				// it without PostgreSQL.
				t.Cleanup(func() {
					if pgStopped {
						postgresCtl(t, "start")
					}
				})
			},
			seen: func(ctx context.Context, r *rig) (bool, string) {
				return r.failing(ctx, v1alpha1.SinkFamilyDatabase, rigPortal, "")
			},
			end: func(_ context.Context, t *testing.T, _ *rig) {
				postgresCtl(t, "start")
				pgStopped = false
			},
		},
		{
			// Both event sinks owe changes when they are edited: the
			// receiver answers 503 and the stream stops capturing the
			// subject. The webhook moves from the relay to the receiver's
			// own port, NATS to a second listener of the same server.
			ns:      "delivery-sink-edit",
			resyncs: true,
			begin: func(ctx context.Context, t *testing.T, r *rig) {
				r.hook.Fail(http.StatusServiceUnavailable)
				r.setStreamSubjects(ctx, t, "parked."+r.subjects)
			},
			seen: func(ctx context.Context, r *rig) (bool, string) {
				if ok, why := r.failing(ctx, v1alpha1.SinkFamilyEvent, rigHook, ""); !ok {
					return ok, why
				}
				return r.failing(ctx, v1alpha1.SinkFamilyEvent, rigStream, "")
			},
			during: func(ctx context.Context, t *testing.T, r *rig) {
				u, err := url.Parse(r.natsURL)
				must(t, err, "nats URL")
				natsFwd = startForwarder(t, u.Host)
				r.editEventSink(ctx, t, rigStream, func(s *v1alpha1.EventSinkSpec) { s.Endpoint = "nats://" + natsFwd.addr() })
				r.editEventSink(ctx, t, rigHook, func(s *v1alpha1.EventSinkSpec) { s.Endpoint = r.hook.URL + "/events" })
				_, relayPostsEdit = r.relay.counts()
			},
			end: func(ctx context.Context, t *testing.T, r *rig) {
				r.setStreamSubjects(ctx, t, r.subjects)
				r.hook.Heal()
			},
			check: func(_ context.Context, t *testing.T, r *rig) {
				_, posts := r.relay.counts()
				t.Logf("after the edit: %d connections to the second NATS listener; %d POSTs at the receiver, %d through the old endpoint (%d before the edit)",
					natsFwd.accepted(), r.hook.Requests(), posts, relayPostsEdit)
				if natsFwd.accepted() == 0 {
					t.Errorf("the NATS sink never connected to its new endpoint")
				}
				if r.hook.Requests() <= posts {
					t.Errorf("the receiver got no delivery through the webhook's new endpoint")
				}
			},
		},
		{
			// The replica runs with --sink-client-max-age=2s: changes flow
			// for about 10s, across several rebuilds of each client.
			ns:   "delivery-client-rebuild",
			opts: rigOptions{privateNATS: true},
			begin: func(ctx context.Context, t *testing.T, r *rig) {
				var err error
				natsConns0, err = r.natsSrv.totalConnections(ctx)
				must(t, err, "nats-server connections")
				relayConns0, _ = r.relay.counts()
			},
			seen: func(context.Context, *rig) (bool, string) { return true, "" },
			during: func(ctx context.Context, t *testing.T, r *rig) {
				for range 8 {
					time.Sleep(1200 * time.Millisecond)
					r.churn(ctx, t)
				}
			},
			end: func(context.Context, *testing.T, *rig) {},
			check: func(ctx context.Context, t *testing.T, r *rig) {
				natsConns, err := r.natsSrv.totalConnections(ctx)
				must(t, err, "nats-server connections")
				relayConns, _ := r.relay.counts()
				t.Logf("while changes flowed: %d new connections to nats-server, %d to the webhook", natsConns-natsConns0, relayConns-relayConns0)
				if natsConns-natsConns0 < 3 || relayConns-relayConns0 < 3 {
					t.Errorf("sink clients were rebuilt fewer than 3 times in about 10s (nats %d, webhook %d new connections): is --sink-client-max-age=2s in effect?",
						natsConns-natsConns0, relayConns-relayConns0)
				}
			},
		},
		revokeFault("delivery-revoke-items", "read-items", v1alpha1.ReasonItemsForbidden, &frozen),
		revokeFault("delivery-revoke-use", "use-sinks", v1alpha1.ReasonSinkForbidden, &frozen),
	}
}

// revokeFault deletes the requester's RoleBinding binding; the exporter
// must stop (every entry Failed with reason) and deliver nothing until the
// binding returns, then deliver everything.
func revokeFault(ns, binding, reason string, frozen *delivered) deliveryFault {
	return deliveryFault{
		ns:   ns,
		opts: rigOptions{requester: true},
		begin: func(ctx context.Context, t *testing.T, r *rig) {
			must(t, kube.RbacV1().RoleBindings(r.ns).Delete(ctx, binding, metav1.DeleteOptions{}), "revoking "+binding)
		},
		seen: func(ctx context.Context, r *rig) (bool, string) {
			for _, s := range []struct {
				family v1alpha1.SinkFamily
				name   string
			}{{v1alpha1.SinkFamilyEvent, rigHook}, {v1alpha1.SinkFamilyEvent, rigStream}, {v1alpha1.SinkFamilyDatabase, rigPortal}} {
				if ok, why := r.failing(ctx, s.family, s.name, reason); !ok {
					return ok, why
				}
			}
			return true, ""
		},
		during: func(ctx context.Context, t *testing.T, r *rig) { *frozen = r.delivered(ctx, t) },
		end: func(ctx context.Context, t *testing.T, r *rig) {
			if now := r.delivered(ctx, t); !now.equal(*frozen) {
				t.Errorf("the sinks received data while the grant was revoked: before %s, after %s", frozen, now)
			}
			bind(ctx, t, r.ns, binding, "exporter")
		},
	}
}

// delivered is what the sinks had received at one moment.
type delivered struct {
	webhookRequests int
	natsMessages    uint64
	rows            map[string]pgRow
}

func (d delivered) equal(o delivered) bool {
	return d.webhookRequests == o.webhookRequests && d.natsMessages == o.natsMessages && maps.Equal(d.rows, o.rows)
}

func (d delivered) String() string {
	return fmt.Sprintf("{%d webhook requests, %d NATS messages, %d rows}", d.webhookRequests, d.natsMessages, len(d.rows))
}

func (r *rig) delivered(ctx context.Context, t *testing.T) delivered {
	t.Helper()
	info, err := r.stream.Info(ctx)
	must(t, err, "stream info")
	rows, err := pgRows(ctx, r.schema, "inventory", r.ns, r.invs[0])
	must(t, err, "postgres rows")
	return delivered{webhookRequests: r.hook.Requests(), natsMessages: info.State.Msgs, rows: rows}
}

// setStreamSubjects changes what the rig's stream captures.
func (r *rig) setStreamSubjects(ctx context.Context, t *testing.T, subjects string) {
	t.Helper()
	_, err := r.js.UpdateStream(ctx, jetstream.StreamConfig{Name: r.streamName, Subjects: []string{subjects}, Duplicates: 2 * time.Minute})
	must(t, err, "updating the stream's subjects to "+subjects)
}
