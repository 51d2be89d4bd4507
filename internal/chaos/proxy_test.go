//go:build unix

package chaos_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proxy forwards TCP connections from its own listener to target. One worker
// reaches Postgres only through its proxy, so the test can cut that worker
// off alone.
//
// A cut (freeze) is a partition, not a reset: every byte already sent or
// sent during the cut, in either direction, is held, and new connections
// wait before they are dialed. When the cut heals (thaw) the held bytes are
// delivered, so statements the worker sent before or during the cut reach
// Postgres late, typically after its leases were taken over; fencing must
// make them match nothing. Connections the worker gave up on meanwhile are
// closed after their held bytes are delivered.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	open  chan struct{} // closed while forwarding; a fresh one while frozen
	conns map[net.Conn]struct{}

	closed chan struct{}
	wg     sync.WaitGroup
}

// newProxy listens on a free port of 127.0.0.1; it is closed when t ends.
func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	open := make(chan struct{})
	close(open)
	p := &proxy{ln: ln, target: target, open: open, conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the address workers connect to.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

// freeze stops forwarding until thaw.
func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already frozen
	}
}

// thaw resumes forwarding and delivers what was held.
func (p *proxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// pass waits while the proxy is frozen; false when it is closing.
func (p *proxy) pass() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.closed:
		return false
	}
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *proxy) serve(client net.Conn) {
	defer p.untrack(client)
	if !p.pass() {
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return // the server is down (restarting): the client sees a reset
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var both sync.WaitGroup
	both.Go(func() { p.pipe(server, client) })
	both.Go(func() { p.pipe(client, server) })
	both.Wait()
}

// pipe copies src to dst, holding data while frozen; when either side ends
// both connections are closed, which ends the other direction too.
func (p *proxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = src.Close()
		_ = dst.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// track records c so close can end it; false (and c closed) when closing.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		_ = c.Close()
		return false
	default:
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// close stops accepting, ends every connection and waits for its goroutines.
func (p *proxy) close() {
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		return
	default:
	}
	close(p.closed)
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

// TestProxyHoldsAndDelivers checks the cut semantics the suite relies on:
// bytes sent during a cut arrive, late, once it heals.
func TestProxyHoldsAndDelivers(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer echo.Close()
	var served sync.WaitGroup
	defer served.Wait()
	served.Go(func() {
		c, err := echo.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
	})
	p := newProxy(t, echo.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	roundTrip := func(msg string) {
		t.Helper()
		_, err := c.Write([]byte(msg))
		require.NoError(t, err)
		got := make([]byte, len(msg))
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		require.Equal(t, msg, string(got))
	}
	roundTrip("before")

	p.freeze()
	_, err = c.Write([]byte("during"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	require.ErrorAs(t, err, &ne, "nothing may pass while frozen")
	require.True(t, ne.Timeout())

	p.thaw()
	got := make([]byte, len("during"))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, "during", string(got), "held bytes are delivered when the cut heals")
	roundTrip("after")
}
