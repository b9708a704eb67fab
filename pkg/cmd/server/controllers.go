package server

import (
	"context"
	"sync"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/controllers/leader"
)

// installControllers starts the controllers with the server: a post-start
// hook starts them (the loopback client works from then on) and a
// pre-shutdown hook stops them and releases the lease while the server
// still serves. host is the host cluster; the configs' Host and Loopback
// are filled in here. It lives here, not in pkg/controllers/leader, so that
// the controllers do not depend on the generic API server.
func installControllers(server *genericapiserver.GenericAPIServer, o *leader.Options, host *rest.Config, cfg leader.Configs) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var started sync.Once
	server.AddPostStartHookOrDie("kollect-controllers", func(hook genericapiserver.PostStartHookContext) error {
		started.Do(func() {
			cfg.Collect.Host, cfg.Collect.Loopback = host, rest.CopyConfig(hook.LoopbackClientConfig)
			cfg.Export.Host, cfg.Export.Loopback = host, rest.CopyConfig(hook.LoopbackClientConfig)
			stop := context.AfterFunc(hook, cancel)
			go func() {
				defer close(done)
				defer stop()
				if err := o.Run(ctx, host, cfg); err != nil {
					klog.ErrorS(err, "Controllers stopped")
				}
			}()
		})
		return nil
	})
	server.AddPreShutdownHookOrDie("kollect-controllers", func() error {
		cancel()
		started.Do(func() { close(done) }) // never started: nothing to wait for
		select {
		case <-done:
		case <-time.After(o.RenewDeadline + 10*time.Second):
			klog.Info("Controllers did not stop in time")
		}
		return nil
	})
}
