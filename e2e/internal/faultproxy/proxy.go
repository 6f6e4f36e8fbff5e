// Package faultproxy is a TCP proxy that the whole-stack suites put
// between the service and a dependency (Redis, PostgreSQL or PgBouncer) to
// make it slow or broken on cue, deterministically: latency added to every
// chunk that arrives while it is set (each way on its own), stalls that
// keep every connection open and forward nothing (a half-open peer), and
// resets that end every connection with a TCP RST. Stopping or restarting
// the dependency itself is the test's own doing; the proxy makes it slow.
package faultproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards the connections it accepts to one upstream address. Its
// methods are safe for concurrent use.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu       sync.Mutex
	toUp     time.Duration // latency added client → upstream
	toClient time.Duration // latency added upstream → client
	gate     chan struct{} // closed while nothing is stalled
	links    map[*link]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// link is one proxied connection.
type link struct{ client, up net.Conn }

// Start listens on a free port of 127.0.0.1 and forwards to upstream until
// the test ends.
func Start(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("faultproxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, gate: make(chan struct{}), links: map[*link]struct{}{}}
	close(p.gate)
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the address clients connect to instead of the upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk that arrives from now on by toUpstream on
// its way to the upstream and by toClient on its way back. Zero forwards
// at once. A chunk keeps the latency of its arrival, so bytes stay in
// order.
func (p *Proxy) SetLatency(toUpstream, toClient time.Duration) {
	p.mu.Lock()
	p.toUp, p.toClient = toUpstream, toClient
	p.mu.Unlock()
}

// Stall stops forwarding, both ways, until Resume: connections stay open
// and new ones are accepted, but nothing they send arrives, as with a peer
// that went away without closing (half-open) or stopped reading.
func (p *Proxy) Stall() {
	p.mu.Lock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
	p.mu.Unlock()
}

// Resume forwards again what a Stall held, in order.
func (p *Proxy) Resume() {
	p.mu.Lock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
	p.mu.Unlock()
}

// Reset ends every open connection with a TCP RST on both sides and
// returns how many it ended. New connections are accepted as before.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
	return len(links)
}

// Close stops accepting, ends every connection and waits for the
// forwarding to stop.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Resume()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			reset(c)
			continue
		}
		l := &link{client: c, up: up}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.reset()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		var both sync.WaitGroup
		both.Add(2)
		p.wg.Add(1)
		go p.pipe(&both, c, up, true)
		go p.pipe(&both, up, c, false)
		go func() {
			both.Wait()
			p.mu.Lock()
			delete(p.links, l)
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			p.wg.Done()
		}()
	}
}

// chunk is bytes read from one side, to write to the other no earlier than
// at.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst, each chunk delayed by the latency of its way
// when it arrived and held while the proxy is stalled. When either side
// fails, both connections end.
func (p *Proxy) pipe(done *sync.WaitGroup, src, dst net.Conn, toUpstream bool) {
	defer done.Done()
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				d := p.toClient
				if toUpstream {
					d = p.toUp
				}
				p.mu.Unlock()
				chunks <- chunk{b: buf[:n], at: time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if wait := time.Until(c.at); wait > 0 {
			time.Sleep(wait)
		}
		p.mu.Lock()
		gate := p.gate
		p.mu.Unlock()
		<-gate
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	// The peer closed or failed: close the other side too, and drain.
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = src.Close()
	for range chunks {
	}
}

func (l *link) reset() {
	reset(l.client)
	reset(l.up)
}

// reset closes c with a TCP RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
