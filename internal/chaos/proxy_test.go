//go:build unix

package chaos_test

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/testbound"
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
//
// Slow answers (slow) are a link that is slow one way: every byte from the
// server to the worker is delivered d after the proxy read it, in order,
// while the worker's bytes reach the server at once. A statement therefore
// lands (and a grant is made, on the database clock) d before the worker
// learns of it. fast ends it; bytes already read keep their delivery time,
// so nothing is reordered. A cut holds the delayed bytes too.
type proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // server->worker delay in nanoseconds; 0: none

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

// slow delays every byte from the server to the worker by d from now on.
func (p *proxy) slow(d time.Duration) { p.delay.Store(int64(d)) }

// fast ends slow answers for the bytes read from now on.
func (p *proxy) fast() { p.delay.Store(0) }

// String reports the proxy's state, for a failure's report: open or
// frozen, the answers' delay, and how many connections it carries (each
// worker connection is two: the worker's and the server's).
func (p *proxy) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	state := "open"
	select {
	case <-p.open:
	default:
		state = "FROZEN"
	}
	return fmt.Sprintf("%s → %s: %s, answers delayed %v, %d connections", p.ln.Addr(), p.target, state, time.Duration(p.delay.Load()), len(p.conns))
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
	both.Go(func() { p.answers(client, server) })
	both.Wait()
}

// chunk is bytes read from the server, due at the worker at due.
type chunk struct {
	data []byte
	due  time.Time
}

// answers copies the server's bytes (src) to the worker (dst) like pipe,
// delivering each chunk the proxy's delay after it was read. The reader
// never waits for the delay, so a slow link does not slow the server down
// nor reorder anything; the held chunks are delivered before the
// connections are closed when the server ends.
func (p *proxy) answers(dst, src net.Conn) {
	queue := make(chan chunk, 4096)
	var deliver sync.WaitGroup
	deliver.Go(func() {
		defer func() {
			_ = src.Close()
			_ = dst.Close()
			for range queue { // unblock the reader
			}
		}()
		for c := range queue {
			if wait := time.Until(c.due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-p.closed:
					t.Stop()
					return
				}
			}
			if !p.pass() {
				return
			}
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			break
		}
	}
	close(queue)
	deliver.Wait()
}

// pipe copies src to dst (the worker's bytes to the server), holding data
// while frozen; when either side ends
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

// TestProxySlowAnswers checks slow answers: the server's bytes arrive d
// late and in order, the worker's bytes reach the server at once, and fast
// ends the delay.
func TestProxySlowAnswers(t *testing.T) {
	// d is well above a wake-up on a loaded host, so that "delayed by d"
	// and "not delayed" (a local hop: under testbound.Wakeup) stay apart.
	const d = 3 * testbound.Wakeup
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer echo.Close()
	arrived := make(chan time.Time, 16) // when the server read each request
	var served sync.WaitGroup
	defer served.Wait()
	served.Go(func() {
		c, err := echo.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 1)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			arrived <- time.Now()
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	p := newProxy(t, echo.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	ask := func(b byte) (toServer, roundTrip time.Duration) {
		t.Helper()
		sent := time.Now()
		_, err := c.Write([]byte{b})
		require.NoError(t, err)
		got := make([]byte, 1)
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		require.Equal(t, b, got[0])
		return (<-arrived).Sub(sent), time.Since(sent)
	}
	ask('a') // connected

	p.slow(d)
	toServer, rt := ask('b')
	require.Less(t, toServer, testbound.Wakeup, "the worker's bytes are not held")
	require.GreaterOrEqual(t, rt, d, "the server's answer is delayed")

	// Three requests in a row: answers in order, each d after its request.
	sent := time.Now()
	_, err = c.Write([]byte("cde"))
	require.NoError(t, err)
	got := make([]byte, 3)
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, "cde", string(got))
	require.GreaterOrEqual(t, time.Since(sent), d)
	// Serialized behind each other's delay, they would take 3d.
	require.Less(t, time.Since(sent), 2*d, "answers are delayed, not serialized behind each other's delay")
	for range 3 {
		<-arrived
	}

	p.fast()
	_, rt = ask('f')
	require.Less(t, rt, d, "fast ends the delay")
}
