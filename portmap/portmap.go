// Package portmap implements the port mapper protocol, version 2 (RFC 1833 section 3):
// a client that registers services with a running rpcbind, and a minimal server
// (NULL, SET, UNSET, GETPORT, DUMP) for hosts that have none.
//
// It owns only the mapping table and its wire format; it must not know about NFS.
package portmap

import (
	"context"
	"sync"

	"snfs/sunrpc"
	"snfs/xdr"
)

// Program number, version and procedures.
const (
	Program = 100000
	Version = 2

	ProcNull    = 0
	ProcSet     = 1
	ProcUnset   = 2
	ProcGetPort = 3
	ProcDump    = 4

	ProtoTCP = 6
	ProtoUDP = 17
)

// Mapping is a struct mapping.
type Mapping struct {
	Prog, Vers, Prot, Port uint32
}

// Encode implements xdr.Encoder.
func (m *Mapping) Encode(w *xdr.Writer) {
	w.Uint32(m.Prog)
	w.Uint32(m.Vers)
	w.Uint32(m.Prot)
	w.Uint32(m.Port)
}

// Decode implements xdr.Decoder.
func (m *Mapping) Decode(r *xdr.Reader) error {
	m.Prog, m.Vers, m.Prot, m.Port = r.Uint32(), r.Uint32(), r.Uint32(), r.Uint32()
	return r.Err()
}

type boolRes struct{ v bool }

func (b *boolRes) Decode(r *xdr.Reader) error { b.v = r.Bool(); return r.Err() }

type portRes struct{ port uint32 }

func (p *portRes) Decode(r *xdr.Reader) error { p.port = r.Uint32(); return r.Err() }

// Set registers m with the port mapper behind c; it reports whether it was accepted.
func Set(ctx context.Context, c *sunrpc.Client, m Mapping) (bool, error) {
	var res boolRes
	err := c.Call(ctx, ProcSet, &m, &res)
	return res.v, err
}

// Unset removes the registrations of prog/vers.
func Unset(ctx context.Context, c *sunrpc.Client, prog, vers uint32) (bool, error) {
	var res boolRes
	err := c.Call(ctx, ProcUnset, &Mapping{Prog: prog, Vers: vers}, &res)
	return res.v, err
}

// GetPort asks for the port of prog/vers/prot; 0 means not registered.
func GetPort(ctx context.Context, c *sunrpc.Client, prog, vers, prot uint32) (uint32, error) {
	var res portRes
	err := c.Call(ctx, ProcGetPort, &Mapping{Prog: prog, Vers: vers, Prot: prot}, &res)
	return res.port, err
}

// Server is an in-process port mapper.
type Server struct {
	mu   sync.Mutex
	maps []Mapping // guarded by mu
}

// Add registers a mapping directly (the server's own services).
func (s *Server) Add(m Mapping) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.maps {
		if s.maps[i].Prog == m.Prog && s.maps[i].Vers == m.Vers && s.maps[i].Prot == m.Prot {
			s.maps[i] = m
			return
		}
	}
	s.maps = append(s.maps, m)
}

// Program returns the procedure table. SET and UNSET are refused (answer false):
// only the server's own services are listed.
func (s *Server) Program() *sunrpc.Program {
	refuse := func(ctx context.Context, c *sunrpc.Call, a *xdr.Reader, w *xdr.Writer) error {
		var m Mapping
		if m.Decode(a) != nil {
			return sunrpc.ErrGarbageArgs
		}
		w.Bool(false)
		return nil
	}
	return &sunrpc.Program{Name: "portmap", Number: Program, Versions: map[uint32][]sunrpc.Proc{Version: {
		ProcNull:  {Name: "NULL", Handler: func(ctx context.Context, c *sunrpc.Call, a *xdr.Reader, w *xdr.Writer) error { return nil }},
		ProcSet:   {Name: "SET", Handler: refuse},
		ProcUnset: {Name: "UNSET", Handler: refuse},
		ProcGetPort: {Name: "GETPORT", Handler: func(ctx context.Context, c *sunrpc.Call, a *xdr.Reader, w *xdr.Writer) error {
			var m Mapping
			if m.Decode(a) != nil {
				return sunrpc.ErrGarbageArgs
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			var port uint32
			for _, x := range s.maps {
				if x.Prog == m.Prog && x.Vers == m.Vers && x.Prot == m.Prot {
					port = x.Port
				}
			}
			w.Uint32(port)
			return nil
		}},
		ProcDump: {Name: "DUMP", Handler: func(ctx context.Context, c *sunrpc.Call, a *xdr.Reader, w *xdr.Writer) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			for i := range s.maps {
				w.Bool(true)
				s.maps[i].Encode(w)
			}
			w.Bool(false)
			return nil
		}},
	}}}
}

// dumpRes decodes a DUMP reply (a pmaplist), bounded.
type dumpRes []Mapping

// Decode implements xdr.Decoder.
func (d *dumpRes) Decode(r *xdr.Reader) error {
	for r.Bool() && len(*d) < 4096 {
		var m Mapping
		m.Decode(r)
		*d = append(*d, m)
	}
	return r.Err()
}

// Dump lists the port mapper's registrations.
func Dump(ctx context.Context, c *sunrpc.Client) ([]Mapping, error) {
	var res dumpRes
	err := c.Call(ctx, ProcDump, nil, &res)
	return res, err
}
