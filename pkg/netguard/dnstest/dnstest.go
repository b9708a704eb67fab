// Package dnstest is a DNS server for tests of name resolution: it answers
// A and AAAA queries over UDP from a table the test changes while it runs,
// including answers that change from one lookup to the next (rebinding).
// Everything else gets NXDOMAIN or an empty answer.
package dnstest

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
)

const (
	typeA    = 1
	typeAAAA = 28
	classIN  = 1
)

// Server answers DNS queries on a loopback UDP port.
type Server struct {
	conn *net.UDPConn

	mu sync.Mutex
	// answers are, per name, the answers of successive lookups; the last
	// one repeats.
	answers map[string][][]netip.Addr
	// served counts the queries of each name and type.
	served map[question]int
}

type question struct {
	name  string
	qtype uint16
}

// Start serves on 127.0.0.1 at a free port until Close.
func Start() (*Server, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	s := &Server{conn: conn, answers: map[string][][]netip.Addr{}, served: map[question]int{}}
	go s.serve()
	return s, nil
}

// Addr is the server's ip:port.
func (s *Server) Addr() string { return s.conn.LocalAddr().String() }

// Close stops the server.
func (s *Server) Close() error { return s.conn.Close() }

// Set makes name resolve to addrs from now on; no addrs makes it unknown
// (NXDOMAIN).
func (s *Server) Set(name string, addrs ...string) {
	if len(addrs) == 0 {
		s.Sequence(name)
		return
	}
	s.Sequence(name, addrs)
}

// Sequence makes the n-th A lookup of name (and, separately, the n-th AAAA
// lookup) answer from lookups[n], counted from now; the last entry answers
// every later lookup. An empty entry is an empty answer, a nil one NXDOMAIN.
// No entries makes the name unknown.
func (s *Server) Sequence(name string, lookups ...[]string) {
	name = canonical(name)
	parsed := make([][]netip.Addr, len(lookups))
	for i, l := range lookups {
		if l == nil {
			continue
		}
		parsed[i] = []netip.Addr{}
		for _, a := range l {
			parsed[i] = append(parsed[i], netip.MustParseAddr(a))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(parsed) == 0 {
		delete(s.answers, name)
	} else {
		s.answers[name] = parsed
	}
	delete(s.served, question{name, typeA})
	delete(s.served, question{name, typeAAAA})
}

// Queries is how many A queries for name were answered since it was last
// set.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[question{canonical(name), typeA}]
}

func canonical(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

func (s *Server) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp := s.answer(buf[:n]); resp != nil {
			_, _ = s.conn.WriteToUDP(resp, from)
		}
	}
}

// answer builds the response to one query, or nil for what is not one.
func (s *Server) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	name, end, ok := readName(q, 12)
	if !ok || end+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[end : end+2])
	addrs, known := s.lookup(canonical(name), qtype)

	resp := make([]byte, 0, 512)
	resp = append(resp, q[0], q[1])           // ID
	resp = append(resp, 0x80|q[2]&0x01, 0x80) // QR, RD copied; RA
	if !known {
		resp[3] |= 3 // NXDOMAIN
	}
	resp = binary.BigEndian.AppendUint16(resp, 1) // QDCOUNT
	resp = binary.BigEndian.AppendUint16(resp, uint16(len(addrs)))
	resp = append(resp, 0, 0, 0, 0) // NSCOUNT, ARCOUNT
	resp = append(resp, q[12:end+4]...)
	for _, a := range addrs {
		resp = append(resp, 0xc0, 12) // the name, by pointer to the question
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, classIN)
		resp = binary.BigEndian.AppendUint32(resp, 0) // TTL: never cache
		b := a.AsSlice()
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(b)))
		resp = append(resp, b...)
	}
	return resp
}

// lookup returns the answers of one query and whether the name is known.
func (s *Server) lookup(name string, qtype uint16) ([]netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq, ok := s.answers[name]
	if !ok {
		return nil, false
	}
	if qtype != typeA && qtype != typeAAAA {
		return nil, true
	}
	k := question{name, qtype}
	i := min(s.served[k], len(seq)-1)
	s.served[k]++
	if seq[i] == nil {
		return nil, false
	}
	var out []netip.Addr
	for _, a := range seq[i] {
		if a.Is4() == (qtype == typeA) {
			out = append(out, a)
		}
	}
	return out, true
}

// readName reads an uncompressed name at off, as in a question.
func readName(b []byte, off int) (string, int, bool) {
	var labels []string
	for off < len(b) {
		n := int(b[off])
		off++
		switch {
		case n == 0:
			return strings.Join(labels, "."), off, true
		case n > 63 || off+n > len(b):
			return "", 0, false
		}
		labels = append(labels, string(b[off:off+n]))
		off += n
	}
	return "", 0, false
}
