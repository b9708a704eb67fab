// Package netguardtest holds what the tests of the guarded dialer and of the
// sinks share: a listener that counts the connections that reach it, to
// show that a refused dial never does.
package netguardtest

import (
	"net"
	"sync/atomic"
	"testing"
)

// Listen accepts connections on network ("tcp" or "unix") at addr and
// counts them; it never answers. It returns the listener's address and
// the count, and closes the listener when the test ends.
func Listen(t testing.TB, network, addr string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			_ = c.Close()
		}
	}()
	return l.Addr().String(), &n
}
