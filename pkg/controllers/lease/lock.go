package lease

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Lock is a Lease lock remembering when this replica last wrote itself
// into the Lease (acquired or renewed). Another replica takes over only
// after seeing the Lease unchanged for a lease duration, so a write sent
// at time T keeps them off until at least T + the lease duration. A
// replica paused past that (SIGSTOP: its monotonic clock runs on) learns
// it from that clock as soon as it runs again, before its elector has
// tried to renew and failed.
//
// It also counts this replica's holds: a hold ends when the Lease is seen
// with another holder, missing, or released. client-go's elector can take
// the Lease again without a new OnStartedLeading (a paused holder resumes
// and finds it released by the replica that took over): that is a new
// hold, and whatever ran under the old one must not write on.
type Lock struct {
	resourcelock.Interface
	mu    sync.Mutex
	last  time.Time     // when the last successful write was sent
	hold  uint64        // this replica's current hold
	ended chan struct{} // closed when hold ends
}

// NewLock is the lock of the Lease namespace/name held as identity.
func NewLock(client coordinationv1client.LeasesGetter, namespace, name, identity string) *Lock {
	return &Lock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}, ended: make(chan struct{})}
}

// Get reads the Lease; one held by another replica, or none, ends this
// replica's hold.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if (err == nil && rec.HolderIdentity != l.Identity()) || apierrors.IsNotFound(err) {
		l.mu.Lock()
		l.endLocked()
		l.mu.Unlock()
	}
	return rec, raw, err
}

// endLocked ends the current hold: nothing written before vouches for
// this replica any more.
func (l *Lock) endLocked() {
	if l.last.IsZero() {
		return // no hold to end
	}
	l.last = time.Time{}
	l.hold++
	close(l.ended)
	l.ended = make(chan struct{})
}

func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.Interface.Create(ctx, ler) })
}

func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.Identity() {
		// A release. client-go's elector releases on what it observed
		// before (IsLeader), though the read it makes first may show the
		// Lease held by another replica since (a renewal that hung past
		// the renew deadline, a pause): that read ended this hold, and
		// clearing the other's hold would let a third take the Lease at
		// once while the other's fence still vouches for its writes.
		l.mu.Lock()
		ended := l.last.IsZero()
		l.mu.Unlock()
		if ended {
			return errNotHolder
		}
	}
	return l.write(ler, func() error { return l.Interface.Update(ctx, ler) })
}

// errNotHolder refuses to release a Lease this replica no longer holds.
var errNotHolder = errors.New("not releasing the Lease: another replica holds it")

func (l *Lock) write(ler resourcelock.LeaderElectionRecord, write func() error) error {
	sent := time.Now()
	err := write()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil:
	case ler.HolderIdentity == l.Identity():
		if sent.After(l.last) {
			l.last = sent
		}
	default:
		l.endLocked() // released
	}
	return err
}

// current is this replica's current hold and the channel closed when it
// ends.
func (l *Lock) current() (uint64, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hold, l.ended
}

// holds tells whether hold is still this replica's hold and it wrote
// itself into the Lease less than d ago.
func (l *Lock) holds(hold uint64, d time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hold == hold && !l.last.IsZero() && time.Since(l.last) < d
}
