package main

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// HTTP_ADDR taken by another process: start-up fails (exit 1, the
// address is valid) naming the variable.
func TestPayments_HTTPAddrInUse_Exit1NamingTheVariable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), "REDIS_URL=", "HTTP_ADDR="+ln.Addr().String())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "HTTP_ADDR") || !strings.Contains(string(out), "in use") {
		t.Fatalf("HTTP_ADDR in use: exit %v (want 1, naming HTTP_ADDR), output %s", err, out)
	}
}
