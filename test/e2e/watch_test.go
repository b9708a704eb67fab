package e2e

import (
	"bufio"
	"context"
	"strings"
	"testing"
	"time"
)

// watchItems runs `kubectl get inventoryitems --watch` in ns and returns
// its event lines as "TYPE KIND NAME"; it stops with ctx.
func watchItems(t *testing.T, ctx context.Context, ns string) <-chan string {
	t.Helper()
	watch := env.Cluster.KubectlCmd(ctx, "get", "inventoryitems", "-n", ns, "--watch", "--output-watch-events",
		"-o", "custom-columns=EVENT:.type,KIND:.object.source.kind,SOURCE:.object.source.name", "--no-headers")
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Process.Kill(); _ = watch.Wait() })
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- strings.Join(strings.Fields(sc.Text()), " ")
		}
	}()
	// kubectl lists before it watches; an empty list prints nothing, so
	// give it a moment to open the watch.
	time.Sleep(2 * time.Second)
	return lines
}

// expectLines waits until every wanted line has been seen, in any order.
func expectLines(t *testing.T, ctx context.Context, lines <-chan string, want ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	var seen []string
	for len(missing) > 0 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl --watch ended; saw %q, still missing %v", seen, missing)
			}
			seen = append(seen, l)
			delete(missing, l)
		case <-ctx.Done():
			t.Fatalf("timed out; saw %q, still missing %v", seen, missing)
		}
	}
}
