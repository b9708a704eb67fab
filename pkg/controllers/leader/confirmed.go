package leader

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// confirmedLock is the Lease lock remembering when this replica last wrote
// itself into the Lease (acquired or renewed). Another replica takes over
// only after seeing the Lease unchanged for a lease duration, so a write
// sent at time T keeps them off until at least T + the lease duration. A
// replica paused past that (SIGSTOP: its monotonic clock runs on) learns
// it from that clock as soon as it runs again, before its elector has
// tried to renew and failed.
type confirmedLock struct {
	resourcelock.Interface
	mu   sync.Mutex
	last time.Time // when the last successful write was sent
}

func (l *confirmedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.Interface.Create(ctx, ler) })
}

func (l *confirmedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.Interface.Update(ctx, ler) })
}

func (l *confirmedLock) write(ler resourcelock.LeaderElectionRecord, write func() error) error {
	sent := time.Now()
	err := write()
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.mu.Lock()
		if sent.After(l.last) {
			l.last = sent
		}
		l.mu.Unlock()
	}
	return err
}

// within tells whether this replica wrote itself into the Lease less than
// d ago.
func (l *confirmedLock) within(d time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.last.IsZero() && time.Since(l.last) < d
}
