// Package local starts the processes the benchmark tools measure: a private
// redis-server and servers on free loopback addresses.
package local

import (
	"log"
	"net"
	"os/exec"
	"time"
)

// FreeAddr returns a free 127.0.0.1 address.
func FreeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WaitListening waits up to 10s for addr to accept connections.
func WaitListening(addr string) {
	for i := 0; i < 1000; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Fatalf("%s never listened", addr)
}

// StartRedis starts a private redis-server without persistence in dir and
// returns its address and a function that stops it.
func StartRedis(dir string) (string, func()) {
	addr := FreeAddr()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		log.Fatalf("redis-server: %v", err)
	}
	WaitListening(addr)
	return addr, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
}
