// Package freeport hands tests loopback addresses that are free now and
// never handed out before in this process: the kernel may give the same
// ephemeral port to two listeners opened and closed one after the other,
// and a test that asks for an HTTP and a NATS address must not get one
// port twice.
package freeport

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Addr is a free 127.0.0.1:port address.
func Addr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(Port(t)))
}

// Port is a free loopback port number.
func Port(t testing.TB) int {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("freeport: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !handed[port] {
			handed[port] = true
			return port
		}
	}
	t.Fatal("freeport: no port that was not handed out already")
	return 0
}
