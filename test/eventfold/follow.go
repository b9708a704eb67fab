package eventfold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Follow folds every message of a JetStream stream into f, from the
// stream's first message, in stream order, through an ordered consumer
// (which resumes after its last message when the server restarts). It
// returns once the consumer exists and folds in the background until ctx
// ends or the test cleans up; then it fails the test if a message could
// not be folded, and logs the read errors it recovered from (a server
// restart is one): whether the fold is complete is for Fold.WaitEqual to
// tell.
func Follow(ctx context.Context, t testing.TB, js jetstream.JetStream, stream string, f *Fold) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cons, err := js.OrderedConsumer(cctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	cancel()
	if err != nil {
		t.Fatalf("eventfold: ordered consumer on stream %q: %v", stream, err)
	}
	// Messages rather than Consume: our own loop knows when the last
	// message has been folded, so the cleanup can wait for it.
	it, err := cons.Messages()
	if err != nil {
		t.Fatalf("eventfold: reading stream %q: %v", stream, err)
	}

	var (
		mu                 sync.Mutex
		readErrs, foldErrs []error
	)
	record := func(to *[]error, err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(*to) < 20 {
			*to = append(*to, err)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stop:
		}
		it.Stop()
	}()
	go func() {
		defer close(done)
		for {
			msg, err := it.Next()
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			if err != nil {
				record(&readErrs, fmt.Errorf("reading stream %q: %w", stream, err))
				// The ordered consumer recreates itself; don't spin while
				// it cannot.
				select {
				case <-ctx.Done():
					return
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			if err := f.ApplyJSON(msg.Data()); err != nil {
				seq := uint64(0)
				if md, mdErr := msg.Metadata(); mdErr == nil {
					seq = md.Sequence.Stream
				}
				record(&foldErrs, fmt.Errorf("stream %q message %d (subject %s): %w", stream, seq, msg.Subject(), err))
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		if len(readErrs) > 0 {
			t.Logf("eventfold.Follow: recovered from: %v", errors.Join(readErrs...))
		}
		if len(foldErrs) > 0 {
			t.Errorf("eventfold.Follow: messages that are no Kollect event: %v", errors.Join(foldErrs...))
		}
	})
}
