// Command kollect-apiserver serves the kollect.dev API as a Kubernetes
// aggregated API server, from its own etcd.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"kollect.dev/kollect/pkg/cmd/server"
)

// Build information, stamped by hack/build-image.sh (and the Dockerfile) with
//
//	-ldflags "-X main.version=v0.1.0 -X main.gitCommit=<sha> -X main.gitTreeState=clean -X main.buildDate=<RFC 3339>"
//
// A plain `go build` leaves them empty: --version then says v0.0.0-dev.
//
// These are Kollect's own variables on purpose, not
// k8s.io/component-base/version's gitVersion, gitMajor and gitMinor (which
// Kubernetes' hack/lib/version.sh stamps): the server derives its
// compatibility version from that one (compatibility.DefaultBuildEffectiveVersion,
// pkg/cmd/server), and a Kollect version such as v0.1.0 there would make the
// server emulate Kubernetes 0.1 instead of the 1.36 libraries it is built from.
var (
	version      string
	gitCommit    string
	gitTreeState string
	buildDate    string
)

// devVersion is what an unstamped build reports.
const devVersion = "v0.0.0-dev"

// buildInfo is what --version=raw prints.
type buildInfo struct {
	Version      string `json:"version"`
	GitCommit    string `json:"gitCommit,omitempty"`
	GitTreeState string `json:"gitTreeState,omitempty"`
	BuildDate    string `json:"buildDate,omitempty"`
	GoVersion    string `json:"goVersion"`
	Compiler     string `json:"compiler"`
	Platform     string `json:"platform"`
	// Kubernetes is the version of the k8s.io/apiserver library built in.
	Kubernetes string `json:"kubernetes,omitempty"`
}

func getBuildInfo() buildInfo {
	info := buildInfo{
		Version:      version,
		GitCommit:    gitCommit,
		GitTreeState: gitTreeState,
		BuildDate:    buildDate,
		GoVersion:    runtime.Version(),
		Compiler:     runtime.Compiler,
		Platform:     runtime.GOOS + "/" + runtime.GOARCH,
	}
	if info.Version == "" {
		info.Version = devVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "k8s.io/apiserver" {
				info.Kubernetes = dep.Version
			}
		}
		// A plain `go build` in a git checkout records the commit itself.
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && info.GitCommit == "":
				info.GitCommit = s.Value
			case s.Key == "vcs.modified" && info.GitTreeState == "":
				if modified, _ := strconv.ParseBool(s.Value); modified {
					info.GitTreeState = "dirty"
				} else {
					info.GitTreeState = "clean"
				}
			}
		}
	}
	return info
}

// versionFlag is --version: "true" (also plain --version) prints
// "kollect-apiserver <version>", "raw" prints the build information as JSON,
// "false" (the default) runs the server.
type versionFlag string

func (v *versionFlag) String() string { return string(*v) }
func (v *versionFlag) Type() string   { return "version" }
func (v *versionFlag) Set(s string) error {
	if s == "raw" {
		*v = "raw"
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true, false or raw, not %q", s)
	}
	*v = versionFlag(strconv.FormatBool(b))
	return nil
}

// printVersion writes what --version asks for and reports whether it asked
// for anything.
func printVersion(w io.Writer, v versionFlag) (bool, error) {
	info := getBuildInfo()
	switch v {
	case "true":
		_, err := fmt.Fprintf(w, "kollect-apiserver %s\n", info.Version)
		return true, err
	case "raw":
		b, err := json.MarshalIndent(info, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return true, err
	}
	return false, nil
}

func main() {
	o := server.NewOptions()
	showVersion := versionFlag("false")
	cmd := &cobra.Command{
		Use:   "kollect-apiserver",
		Short: "Serve the kollect.dev inventory API behind kube-apiserver's aggregation layer",
		Long: "kollect-apiserver serves Profiles, Targets, Inventories, sinks, Scopes and the collected " +
			"InventoryItems as the kollect.dev/v1alpha1 API group. Without --etcd-servers it runs an " +
			"embedded single-member etcd in --data-dir.",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if done, err := printVersion(cmd.OutOrStdout(), showVersion); done {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	// SetupSignalContext cancels on SIGTERM/SIGINT; a second signal exits at once.
	cmd.SetContext(genericapiserver.SetupSignalContext())
	o.AddFlags(cmd.Flags())
	cmd.Flags().Var(&showVersion, "version", "Print the version and exit; --version=raw prints the build information (commit, build date, Go and Kubernetes library versions) as JSON.")
	cmd.Flags().Lookup("version").NoOptDefVal = "true"
	os.Exit(cli.Run(cmd))
}
