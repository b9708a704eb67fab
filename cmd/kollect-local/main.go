// Command kollect-local runs Kollect in a local cluster, on 127.0.0.1 only:
// etcd, kube-apiserver and kollect-apiserver registered through the
// aggregation layer (see pkg/localcluster). It is what `make run` runs.
//
// It brings the cluster up, applies the example manifests, writes a
// kubeconfig to <dir>/kubeconfig, prints "ready" with commands to try, and
// stays in the foreground until SIGINT or SIGTERM, when it stops every
// process it started and exits 0. State persists in --dir across runs.
//
//	kollect-local [--dir _output/local] [--tools-dir _output/tools/bin]
//	              [--kollect-binary _output/bin/kollect-apiserver]
//	              [--examples artifacts/examples] [--file-sink-root DIR]
//	              [-- extra kollect-apiserver flags]
//
// For local development it passes kollect-apiserver
// --allow-private-sink-endpoints, --allow-local-git-sinks and
// --file-sink-root <dir>/file-sinks, which a shared server keeps off; each
// has a flag here to turn it off.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"kollect.dev/kollect/pkg/localcluster"
)

func main() {
	os.Exit(run())
}

func run() int {
	dir := flag.String("dir", "_output/local", "state directory (certificates, etcd data, logs, kubeconfig); reused across runs")
	toolsDir := flag.String("tools-dir", "", "directory of the etcd, kube-apiserver, kube-controller-manager and kubectl binaries (default: $KOLLECT_TOOLS_BIN or _output/tools/bin, built with hack/build-tools.sh when missing)")
	kollectBinary := flag.String("kollect-binary", "_output/bin/kollect-apiserver", "kollect-apiserver binary; empty runs etcd and kube-apiserver only")
	examples := flag.String("examples", "artifacts/examples", "directory of manifests applied with kubectl once ready (skipped when missing or empty)")
	allowPrivate := flag.Bool("allow-private-sink-endpoints", true, "pass --allow-private-sink-endpoints to kollect-apiserver (sinks on this machine)")
	fileSinkRoot := flag.String("file-sink-root", "", "pass --file-sink-root to kollect-apiserver: file sinks write under DIR/<namespace> (default <dir>/file-sinks; \"off\" refuses file sinks)")
	allowLocalGit := flag.Bool("allow-local-git-sinks", true, "pass --allow-local-git-sinks to kollect-apiserver (git sinks on file:// repositories of this machine)")
	clusterName := flag.String("cluster-name", "local", "pass --cluster-name to kollect-apiserver: this cluster's name in exported paths, rows and events (empty: the kube-system namespace UID)")
	fastEtcd := flag.Bool("unsafe-fast-etcd", false, "run etcd with --unsafe-no-fsync (faster; a crash of the machine can corrupt the data)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags] [-- kollect-apiserver flags]\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := os.Stdout

	if *toolsDir == "" {
		d, err := defaultToolsDir(ctx, out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kollect-local:", err)
			return exitCode(ctx)
		}
		*toolsDir = d
	}
	// What a shared server keeps off is said once, so that nobody takes it
	// for a default.
	var kollectArgs, notes []string
	if *allowPrivate {
		kollectArgs = append(kollectArgs, "--allow-private-sink-endpoints")
		notes = append(notes, "sinks may reach loopback and private addresses (--allow-private-sink-endpoints)")
	}
	switch *fileSinkRoot {
	case "off":
	case "":
		*fileSinkRoot = filepath.Join(*dir, "file-sinks")
		fallthrough
	default:
		abs, err := filepath.Abs(*fileSinkRoot)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kollect-local: --file-sink-root:", err)
			return 1
		}
		kollectArgs = append(kollectArgs, "--file-sink-root="+abs)
		notes = append(notes, fmt.Sprintf("file sinks write under %s/<namespace> (--file-sink-root)", displayPath(abs)))
	}
	if *allowLocalGit {
		kollectArgs = append(kollectArgs, "--allow-local-git-sinks")
		notes = append(notes, "git sinks may push to file:// repositories of this machine (--allow-local-git-sinks)")
	}
	if *clusterName != "" {
		kollectArgs = append(kollectArgs, "--cluster-name="+*clusterName)
	}
	kollectArgs = append(kollectArgs, flag.Args()...)
	if *kollectBinary == "" {
		fmt.Fprintln(out, "kollect-local: no --kollect-binary: running etcd and kube-apiserver only")
	} else if _, err := os.Stat(*kollectBinary); err != nil {
		fmt.Fprintf(os.Stderr, "kollect-local: kollect-apiserver binary: %v\n(build it with `make build`, or `go build -o %s ./cmd/kollect-apiserver`)\n", err, *kollectBinary)
		return 1
	} else {
		for _, n := range notes {
			fmt.Fprintln(out, "local development:", n)
		}
	}

	begin := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir:           *dir,
		ToolsBinDir:   *toolsDir,
		KollectBinary: *kollectBinary,
		KollectArgs:   kollectArgs,
		Log:           out,
		FastEtcd:      *fastEtcd,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kollect-local:", err)
		return exitCode(ctx)
	}
	if c.Kollect() == nil {
		*examples = "" // they are kollect.dev objects
	}
	if err := applyExamples(ctx, c, *examples, out); err != nil {
		if ctx.Err() != nil {
			<-c.Done()
			return 0
		}
		// The cluster is still worth having: say so and carry on.
		fmt.Fprintf(os.Stderr, "kollect-local: warning: %v\n", err)
	}

	kubectl := displayPath(c.KubectlPath())
	kc := c.AdminKubeconfig()
	fmt.Fprintf(out, "\nready in %.1fs: kube-apiserver %s", time.Since(begin).Seconds(), c.KubeAPIServer().URL())
	if k := c.Kollect(); k != nil {
		fmt.Fprintf(out, ", kollect-apiserver %s (APIService %s Available)", k.URL(), localcluster.APIServiceName)
	}
	fmt.Fprintf(out, "\n\nTry:\n")
	fmt.Fprintf(out, "  %s --kubeconfig %s get kollect -A\n", kubectl, kc)
	fmt.Fprintf(out, "  %s --kubeconfig %s explain inventory.spec\n", kubectl, kc)
	fmt.Fprintf(out, "  %s --kubeconfig %s api-resources --api-group=%s\n", kubectl, kc, localcluster.KollectGroup)
	fmt.Fprintf(out, "or: export KUBECONFIG=%s\n", kc)
	fmt.Fprintf(out, "Logs: %s\n", filepath.Join(c.Dir(), "logs"))
	fmt.Fprintf(out, "Ctrl-C stops everything; the data stays in %s (`make clean` wipes it).\n", c.Dir())

	select {
	case <-ctx.Done():
		stop() // a second Ctrl-C kills kollect-local (and, through Pdeathsig, its children) at once
		fmt.Fprintln(out, "\nstopping...")
		<-c.Done() // Start's context watcher is stopping the cluster
	case <-exited(ctx, c):
		fmt.Fprintln(os.Stderr, "kollect-local: a process of the cluster exited; stopping (see the logs)")
		_ = c.Stop()
		return 1
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "kollect-local:", err)
		return 1
	}
	fmt.Fprintln(out, "stopped")
	return 0
}

// exited is closed when etcd, kube-apiserver, kube-controller-manager or
// kollect-apiserver exits on its own.
func exited(ctx context.Context, c *localcluster.Cluster) <-chan struct{} {
	ch := make(chan struct{})
	procs := []*localcluster.Process{c.Etcd(), c.KubeAPIServer(), c.ControllerManager()}
	if k := c.Kollect(); k != nil {
		procs = append(procs, k)
	}
	for _, p := range procs {
		go func() {
			select {
			case <-p.Done():
				select {
				case <-c.Done():
				case <-ctx.Done(): // stopping on a signal
				default:
					fmt.Fprintf(os.Stderr, "kollect-local: %s exited: %v (log: %s)\n", p.Name(), p.ExitErr(), p.LogFile())
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			case <-c.Done():
			}
		}()
	}
	return ch
}

// exitCode is 0 when the run ended because of SIGINT/SIGTERM, else 1.
func exitCode(ctx context.Context) int {
	if ctx.Err() != nil {
		return 0
	}
	return 1
}

// defaultToolsDir returns $KOLLECT_TOOLS_BIN or _output/tools/bin, running
// hack/build-tools.sh first when a binary is missing there.
func defaultToolsDir(ctx context.Context, out io.Writer) (string, error) {
	d, err := localcluster.DefaultToolsBinDir()
	if err != nil {
		return "", err
	}
	for _, tool := range localcluster.Tools {
		if _, err := os.Stat(filepath.Join(d, tool)); err != nil {
			root, rerr := localcluster.RepoRoot()
			if rerr != nil {
				return "", errors.Join(err, rerr)
			}
			fmt.Fprintf(out, "%s is missing: building the pinned tools (about 10 minutes the first time)\n", filepath.Join(d, tool))
			return localcluster.BuildTools(ctx, root, out)
		}
	}
	return d, nil
}

// applyExamples applies every manifest under dir with kubectl. Manifests
// are applied in file order, so an object may come before its namespace:
// a failed pass is retried (up to three), the way one re-runs kubectl.
func applyExamples(ctx context.Context, c *localcluster.Cluster, dir string, out io.Writer) error {
	if dir == "" {
		return nil
	}
	var manifests int
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			switch strings.ToLower(filepath.Ext(path)) {
			case ".yaml", ".yml", ".json":
				manifests++
			}
		}
		return nil
	})
	if manifests == 0 {
		fmt.Fprintf(out, "no manifests in %s: nothing to apply\n", dir)
		return nil
	}
	begin := time.Now()
	fmt.Fprintf(out, "applying %s (%d files)...", dir, manifests)
	var lastErr error
	for range 3 {
		stdout, _, err := c.Kubectl(ctx, "apply", "--recursive", "-f", dir)
		if err == nil {
			fmt.Fprintf(out, " done in %.1fs\n%s", time.Since(begin).Seconds(), indent(stdout))
			return nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	fmt.Fprintln(out, " failed")
	return fmt.Errorf("applying %s: %w", dir, lastErr)
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

// displayPath shows p relative to the working directory when it is below
// it (_output/tools/bin/kubectl), absolute otherwise.
func displayPath(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	rel, err := filepath.Rel(wd, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return rel
}
