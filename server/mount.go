package server

import (
	"context"
	"path"
	"sort"
	"syscall"

	"snfs/nfs3"
	"snfs/store"

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
	e, rest := s.exportFor(path.Clean(a.Path))
	switch {
	case e == nil:
		res.Status = mount3.ErrNoEnt
	default:
		if _, err := e.access(c); err != nil {
			s.log.Warn("refused mount request", "client", c.Addr, "path", a.Path, "err", err)
			res.Status = mount3.ErrAcces
			break
		}
		fh, err := s.walk(e, rest)
		if err != nil {
			res.Status = mountStatus(err)
			break
		}
		res.FH = fh
		res.AuthFlavors = []uint32{sunrpc.AuthSys, sunrpc.AuthNone}
		s.mu.Lock()
		s.mounts[mount3.MountBody{Hostname: clientName(c), Directory: a.Path}] = struct{}{}
		s.mu.Unlock()
	}
	res.Encode(w)
	return nil
}

// exportFor finds the export that contains p (the longest matching path) and the
// path of p below it.
func (s *Server) exportFor(p string) (*export, []string) {
	byPath := s.table().byPath
	for dir, rest := p, []string(nil); ; {
		if e := byPath[dir]; e != nil {
			return e, rest
		}
		if dir == "/" || dir == "." {
			return nil, nil
		}
		rest = append([]string{path.Base(dir)}, rest...)
		dir = path.Dir(dir)
	}
}

// walk looks up the components below an export's root, as root and without
// following symlinks, so a client can mount a subdirectory (as knfsd allows).
func (s *Server) walk(e *export, comps []string) ([]byte, error) {
	fh := e.st.Root
	for _, name := range comps {
		n, err := s.store.Resolve(fh)
		if err != nil {
			return nil, err
		}
		if name == ".." {
			n.Release()
			return nil, errAccess
		}
		fh, _, err = s.store.Lookup(n, name)
		n.Release()
		if err != nil {
			return nil, err
		}
	}
	n, err := s.store.Resolve(fh)
	if err != nil {
		return nil, err
	}
	defer n.Release()
	if n.Stat.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, store.ErrNotDir
	}
	return fh, nil
}

// mountStatus maps an error to mountstat3 through the NFS mapping.
func mountStatus(err error) mount3.Status {
	switch st := statusOf(err); st {
	case nfs3.ErrNoEnt, nfs3.ErrStale:
		return mount3.ErrNoEnt
	case nfs3.ErrAcces, nfs3.ErrPerm:
		return mount3.ErrAcces
	case nfs3.ErrNotDir:
		return mount3.ErrNotDir
	case nfs3.ErrNameTooLong:
		return mount3.ErrNameTooLong
	}
	return mount3.ErrIO
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
	for _, e := range s.table().list {
		cfg := &e.config().cfg
		n := mount3.ExportNode{Dir: cfg.Path}
		for _, r := range cfg.Clients {
			n.Groups = append(n.Groups, r.Spec)
		}
		list = append(list, n)
	}
	list.Encode(w)
	return nil
}
