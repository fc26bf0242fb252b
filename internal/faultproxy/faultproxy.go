// Package faultproxy is a TCP proxy for fault tests: it sits between a
// client and a private redis-server and can freeze, blackhole or cut the
// connections through it, one at a time or all together.
//
// A frozen connection stops forwarding in both directions but stays open,
// which is what a stalled peer or a congested network looks like. A
// blackholed connection swallows everything the client sends and never
// answers, which is what a NAT or load balancer that forgot the connection
// looks like (no reset reaches the client). A cut connection is closed with
// a reset, as a killed peer's would be.
//
// Connections that issued SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE are marked
// Subscriber, so a test can break only the pub/sub connection of a client.
package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Mode is what a connection does with the bytes it is given.
type Mode int

// Modes of a connection.
const (
	// Forward copies bytes both ways: the healthy state.
	Forward Mode = iota
	// Freeze holds bytes in both directions until the mode changes; nothing
	// is lost, so a thawed connection carries on where it stopped.
	Freeze
	// Blackhole discards bytes in both directions, silently.
	Blackhole
)

// Proxy forwards loopback connections to a target address.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	cond    *sync.Cond
	conns   map[*Conn]struct{}
	mode    Mode // of new connections, and of all with SetMode
	refuse  bool
	closed  bool
	wg      sync.WaitGroup
	started int
	sent    atomic.Int64 // bytes of the clients written to the target
}

// Start listens on a free loopback port and forwards to target until t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// New listens on a free loopback port and forwards to target. Close stops it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[*Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget changes the address new connections are forwarded to (a server
// restarted on another port, say).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// SetMode puts every open connection, and every new one, in mode m.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	p.mode = m
	for c := range p.conns {
		c.mode = m
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Refuse makes new connections close at once (a dial then fails, as it does
// to a server that is down); Refuse(false) accepts them again.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// CutAll closes every open connection with a reset.
func (p *Proxy) CutAll() {
	for _, c := range p.Conns() {
		c.Cut()
	}
}

// Conns returns the open connections, oldest first.
func (p *Proxy) Conns() []*Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*Conn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	for i := 1; i < len(out); i++ { // few connections: insertion sort by age
		for j := i; j > 0 && out[j].seq < out[j-1].seq; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// Subscribers returns the open connections that issued a subscribe command.
func (p *Proxy) Subscribers() []*Conn {
	var out []*Conn
	for _, c := range p.Conns() {
		if c.Subscriber() {
			out = append(out, c)
		}
	}
	return out
}

// Sent is the number of bytes of the clients passed on to the target so
// far: a command counted here is being written to the server's socket, past
// every mode check (no Freeze or Blackhole set later holds it back), even
// while the server sleeps; and once a command's answer came back, its bytes
// are counted.
func (p *Proxy) Sent() int64 { return p.sent.Load() }

// Accepted is the number of connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// Close stops listening, cuts every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.CutAll()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, target, closed := p.refuse, p.target, p.closed
		p.mu.Unlock()
		if refuse || closed {
			reset(client)
			continue
		}
		server, err := net.Dial("tcp", target)
		if err != nil {
			reset(client)
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			reset(client)
			reset(server)
			continue
		}
		p.started++
		c := &Conn{p: p, client: client, server: server, mode: p.mode, seq: p.started}
		p.conns[c] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go c.pipe(server, client, true)
		go c.pipe(client, server, false)
	}
}

// Conn is one proxied connection.
type Conn struct {
	p      *Proxy
	client net.Conn
	server net.Conn
	seq    int

	// guarded by p.mu
	mode       Mode
	subscriber bool
	cut        bool
	lost       bool // Lose: blackholed for good, whatever SetMode says later
}

// SetMode puts this connection alone in mode m.
func (c *Conn) SetMode(m Mode) {
	c.p.mu.Lock()
	c.mode = m
	c.p.cond.Broadcast()
	c.p.mu.Unlock()
}

// Lose blackholes the connection for good, as a NAT that forgot it: its
// bytes are discarded from now on, whatever mode the proxy or the
// connection is set to later. (A Blackhole that a later SetMode(Forward)
// lifts delivers bytes again after some were lost, which TCP never does:
// a subscriber would miss messages on a connection that then answers its
// pings.)
func (c *Conn) Lose() {
	c.p.mu.Lock()
	c.lost = true
	c.p.cond.Broadcast()
	c.p.mu.Unlock()
}

// Subscriber reports whether the client sent a subscribe command on it.
func (c *Conn) Subscriber() bool {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.subscriber
}

// Cut closes the connection with a reset on both sides.
func (c *Conn) Cut() {
	c.p.mu.Lock()
	if c.cut {
		c.p.mu.Unlock()
		return
	}
	c.cut = true
	delete(c.p.conns, c)
	c.p.cond.Broadcast()
	c.p.mu.Unlock()
	reset(c.client)
	reset(c.server)
}

var subscribeCommands = [][]byte{[]byte("SUBSCRIBE"), []byte("PSUBSCRIBE"), []byte("SSUBSCRIBE")}

// pipe copies src to dst, honouring the connection's mode before each write.
func (c *Conn) pipe(dst, src net.Conn, fromClient bool) {
	defer c.p.wg.Done()
	defer c.Cut()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if fromClient && !c.Subscriber() {
				upper := bytes.ToUpper(chunk)
				for _, cmd := range subscribeCommands {
					if bytes.Contains(upper, cmd) {
						c.p.mu.Lock()
						c.subscriber = true
						c.p.mu.Unlock()
					}
				}
			}
			switch c.await() {
			case Blackhole:
				continue
			case -1:
				return
			}
			if fromClient {
				// Counted before the write: counted after it, the server's
				// reply could reach the client before the count did, and a
				// test reading Sent after its command's answer would see
				// that command's bytes arrive later.
				c.p.sent.Add(int64(len(chunk)))
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			// Half-close: pass the EOF on, keep the other direction open.
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}

// await blocks while the connection is frozen and returns its mode, or -1
// once it is cut.
func (c *Conn) await() Mode {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	for c.mode == Freeze && !c.cut && !c.lost {
		c.p.cond.Wait()
	}
	switch {
	case c.cut:
		return -1
	case c.lost:
		return Blackhole
	}
	return c.mode
}

// reset closes conn so that the peer sees a reset rather than an orderly end.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
