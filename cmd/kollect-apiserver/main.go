// Command kollect-apiserver serves the kollect.dev API as a Kubernetes
// aggregated API server, from its own etcd.
package main

import (
	"os"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"kollect.dev/kollect/pkg/cmd/server"
)

func main() {
	o := server.NewOptions()
	cmd := &cobra.Command{
		Use:   "kollect-apiserver",
		Short: "Serve the kollect.dev inventory API behind kube-apiserver's aggregation layer",
		Long: "kollect-apiserver serves Profiles, Targets, Inventories, sinks, Scopes and the collected " +
			"InventoryItems as the kollect.dev/v1alpha1 API group. Without --etcd-servers it runs an " +
			"embedded single-member etcd in --data-dir.",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	// SetupSignalContext cancels on SIGTERM/SIGINT; a second signal exits at once.
	cmd.SetContext(genericapiserver.SetupSignalContext())
	o.AddFlags(cmd.Flags())
	os.Exit(cli.Run(cmd))
}
