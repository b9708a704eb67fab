package export

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

// DefaultClientMaxAge is how long a sink client built from a Secret is
// used before the Secret is read again (rotation).
const DefaultClientMaxAge = 5 * time.Minute

// sinkClient is a connected sink with what it was built from: a changed
// sink spec, or age (the Secret is read again), builds a new one.
type sinkClient struct {
	*adapter

	fingerprint string
	builtAt     time.Time
	secret      sink.Secret
	// secretVersion is the Secret's resourceVersion ("" without one).
	secretVersion string
}

// Close releases the sink's connections.
func (s *sinkClient) Close() error {
	if s == nil || s.adapter == nil {
		return nil
	}
	return s.adapter.Close()
}

// scrub replaces every Secret value in msg: sinks scrub their own errors,
// and this is the second line of defence for status, Events and logs.
func (s *sinkClient) scrub(msg string) string {
	if s == nil {
		return msg
	}
	values := make([]string, 0, len(s.secret))
	for _, v := range s.secret {
		values = append(values, string(v))
	}
	return plumbing.RedactString(msg, values)
}

// ensureClient (re)builds the exporter's sink client when the sink's spec
// changed, or when the Secret was last read long ago. What the sink is
// owed does not depend on the client: nothing is forgotten here.
func (e *exporter) ensureClient(ctx context.Context, cfg *resolved, set settings) error {
	if e.client != nil && e.client.fingerprint == fingerprintOf(cfg.sink) && time.Since(e.client.builtAt) < set.clientMaxAge {
		return nil
	}
	client, err := e.parent.connect(ctx, cfg.sink)
	if err != nil {
		return err
	}
	if old := e.client; old != nil && old.fingerprint == client.fingerprint && old.secretVersion == client.secretVersion {
		// Rebuilt by age, to the same destination: what the old client
		// learned of it still holds.
		if s, ok := client.Prober.(sink.Successor); ok {
			s.Succeed(old.Prober)
		}
	}
	e.closeClient()
	e.client = client
	if client.secretVersion != e.secretVersion {
		if e.secretVersion != "" {
			// A changed Secret may name another destination (a DSN):
			// restate everything there, as after a spec change.
			e.known, e.respec = false, true
		}
		e.secretVersion = client.secretVersion
	}
	return nil
}

// fingerprintOf identifies the sink spec a client was built from, so that
// a spec edit rebuilds it at once; the Secret is re-read by age instead
// (--sink-client-max-age), which keeps GETs of Secrets off the export path.
func fingerprintOf(obj *sinkObject) string {
	return string(obj.GetUID()) + "/" + fmt.Sprint(obj.GetGeneration())
}

// connect builds a sink client through its family's registry, with the
// sink's Secret read on its requester's authority (readSecret).
func (c *Controller) connect(ctx context.Context, obj *sinkObject) (*sinkClient, error) {
	secret, version, err := c.readSecret(ctx, obj)
	if err != nil {
		return nil, err
	}
	out := &sinkClient{fingerprint: fingerprintOf(obj), builtAt: time.Now(), secret: secret, secretVersion: version}
	out.adapter, err = obj.build(ctx, sink.Params{
		Namespace:    obj.GetNamespace(),
		UID:          string(obj.GetUID()),
		Secret:       secret,
		Dialer:       c.cfg.Dialer,
		StateDir:     filepath.Join(c.cfg.StateDir, "git", string(obj.GetUID())),
		FileSinkRoot: c.cfg.FileSinkRoot,
		AllowLocal:   c.cfg.AllowLocalGitSinks,
	})
	if err != nil {
		// The class survives the scrubbing: probes and status show it.
		return nil, sink.WithOutcome(errors.New(out.scrub(err.Error())), err)
	}
	return out, nil
}
