// Package lease runs work only while this replica holds a Lease in the host
// cluster: the controllers' leader election (pkg/controllers/leader) and
// each member cluster's collection (pkg/controllers/fleet). The work stops
// before the Lease is released, and writes are fenced by Term.Holding.
package lease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
)

// Timings are client-go's leader election timings.
type Timings struct {
	// LeaseDuration is how long the others wait after the holder's last
	// renewal before taking over.
	LeaseDuration time.Duration
	// RenewDeadline is how long the holder keeps trying to renew before
	// it stops; it is also the fence of Term.Holding.
	RenewDeadline time.Duration
	// RetryPeriod is the time between attempts to acquire or renew.
	RetryPeriod time.Duration
}

// Validate checks 0 < retry period < renew deadline < lease duration.
func (t Timings) Validate() error {
	if t.RetryPeriod <= 0 || t.RenewDeadline <= t.RetryPeriod || t.LeaseDuration <= t.RenewDeadline {
		return fmt.Errorf("leases need 0 < retry period (%s) < renew deadline (%s) < lease duration (%s)",
			t.RetryPeriod, t.RenewDeadline, t.LeaseDuration)
	}
	return nil
}

// Term is one hold of the Lease, as run sees it.
type Term struct {
	lock  *Lock
	hold  uint64
	fence time.Duration
}

// Holding tells whether writes may go ahead: the hold this term runs under
// is still this replica's, confirmed within the renew deadline.
func (t Term) Holding() bool { return t.lock.holds(t.hold, t.fence) }

// Hold runs one election for lock: run runs while the Lease is held, once
// per hold (a term), its context ending with the hold. Hold returns when
// the Lease is lost (after run returned) or, once ctx is done, after run
// returned and the Lease was released, so that the next holder starts at
// once instead of after the lease duration.
func Hold(ctx context.Context, lock *Lock, t Timings, logger klog.Logger, run func(context.Context, Term)) error {
	// The election outlives ctx: on shutdown the work stops first, and
	// only then is the Lease released (ReleaseOnCancel requires it).
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()

	var (
		mu      sync.Mutex
		closed  bool // run may not start any more
		running bool
		stopped = make(chan struct{})
	)
	// settle forbids new starts and waits for a running run.
	settle := func() {
		mu.Lock()
		closed = true
		wasRunning := running
		mu.Unlock()
		if wasRunning {
			<-stopped
		}
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            lock.Describe(),
		LeaseDuration:   t.LeaseDuration,
		RenewDeadline:   t.RenewDeadline,
		RetryPeriod:     t.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leCtx context.Context) {
				mu.Lock()
				if closed {
					mu.Unlock()
					return
				}
				running = true
				mu.Unlock()
				defer close(stopped)
				runCtx, cancel := context.WithCancel(leCtx)
				defer cancel()
				stop := context.AfterFunc(ctx, cancel)
				defer stop()
				// The elector stays leader across a hold that ended and one
				// it took again (see Lock): each hold is a term of its own.
				for runCtx.Err() == nil {
					hold, ended := lock.current()
					if !lock.holds(hold, t.RenewDeadline) {
						// Between holds: wait for the elector to write
						// itself into the Lease again, or to give up.
						select {
						case <-runCtx.Done():
						case <-time.After(t.RetryPeriod / 4):
						}
						continue
					}
					termCtx, endTerm := context.WithCancel(runCtx)
					go func() {
						select {
						case <-ended:
						case <-termCtx.Done():
						}
						endTerm()
					}()
					run(termCtx, Term{lock: lock, hold: hold, fence: t.RenewDeadline})
					endTerm()
				}
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				logger.V(1).Info("Lease holder", "holder", id)
			},
		},
	})
	if err != nil {
		return err
	}
	go func() {
		select {
		case <-ctx.Done():
			settle()
			cancelElect()
		case <-electCtx.Done():
		}
	}()
	elector.Run(electCtx)
	settle()
	return nil
}
