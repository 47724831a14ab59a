package server

import (
	"context"
	"path"
	"sort"

	"snfs/mount3"
	"snfs/sunrpc"
	"snfs/xdr"
)

// mountProgram is the MOUNT v3 procedure table (RFC 1813 appendix I).
func (s *Server) mountProgram() *sunrpc.Program {
	procs := []sunrpc.Proc{
		mount3.ProcNull:    {Name: "NULL", Handler: nullProc},
		mount3.ProcMnt:     {Name: "MNT", Handler: s.mnt},
		mount3.ProcDump:    {Name: "DUMP", Handler: s.dump},
		mount3.ProcUmnt:    {Name: "UMNT", Handler: s.umnt},
		mount3.ProcUmntall: {Name: "UMNTALL", Handler: s.umntall},
		mount3.ProcExport:  {Name: "EXPORT", Handler: s.exportList},
	}
	return &sunrpc.Program{Name: "mount", Number: mount3.Program, Versions: map[uint32][]sunrpc.Proc{mount3.Version: procs}}
}

func clientName(c *sunrpc.Call) string {
	if ip := c.ClientIP(); ip != nil {
		return ip.String()
	}
	return c.Addr.String()
}

// mnt is MNT (RFC 1813 section 5.2.1): the root handle of an export the client may
// use, and the auth flavors it accepts.
func (s *Server) mnt(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a mount3.DirPath
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	res := mount3.MntRes{Status: mount3.OK}
	e := s.byPath[path.Clean(a.Path)]
	switch {
	case e == nil:
		res.Status = mount3.ErrNoEnt
	default:
		if _, ok := e.rule(c.ClientIP()); !ok {
			res.Status = mount3.ErrAcces
			break
		}
		res.FH = e.st.Root
		res.AuthFlavors = []uint32{sunrpc.AuthSys, sunrpc.AuthNone}
		s.mu.Lock()
		s.mounts[mount3.MountBody{Hostname: clientName(c), Directory: a.Path}] = struct{}{}
		s.mu.Unlock()
	}
	res.Encode(w)
	return nil
}

// dump is DUMP (RFC 1813 section 5.2.2): the mounts this server knows of.
func (s *Server) dump(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	s.mu.Lock()
	list := make(mount3.MountList, 0, len(s.mounts))
	for m := range s.mounts {
		list = append(list, m)
	}
	s.mu.Unlock()
	sort.Slice(list, func(i, j int) bool {
		if list[i].Hostname != list[j].Hostname {
			return list[i].Hostname < list[j].Hostname
		}
		return list[i].Directory < list[j].Directory
	})
	list.Encode(w)
	return nil
}

// umnt is UMNT (RFC 1813 section 5.2.3): forget one mount of the caller.
func (s *Server) umnt(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var a mount3.DirPath
	if a.Decode(args) != nil {
		return sunrpc.ErrGarbageArgs
	}
	s.mu.Lock()
	delete(s.mounts, mount3.MountBody{Hostname: clientName(c), Directory: a.Path})
	s.mu.Unlock()
	return nil
}

// umntall is UMNTALL (RFC 1813 section 5.2.4): forget every mount of the caller.
func (s *Server) umntall(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	host := clientName(c)
	s.mu.Lock()
	for m := range s.mounts {
		if m.Hostname == host {
			delete(s.mounts, m)
		}
	}
	s.mu.Unlock()
	return nil
}

// exportList is EXPORT (RFC 1813 section 5.2.5): the exports and who may mount them.
func (s *Server) exportList(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
	var list mount3.Exports
	for _, e := range s.exports {
		n := mount3.ExportNode{Dir: e.cfg.Path}
		for _, r := range e.cfg.Clients {
			n.Groups = append(n.Groups, r.Spec)
		}
		list = append(list, n)
	}
	list.Encode(w)
	return nil
}
