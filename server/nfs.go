package server

import (
	"context"

	"snfs/nfs3"
	"snfs/sunrpc"
	"snfs/xdr"
)

// handler is a typed NFS procedure: it fills res from args.
type handler[A, R any] func(ctx context.Context, c *sunrpc.Call, args *A, res *R)

// proc adapts a typed handler to a sunrpc.Proc: decode (GARBAGE_ARGS on failure),
// handle, encode. cache marks non-idempotent procedures for the reply cache.
func proc[A, R any, PA interface {
	*A
	xdr.Decoder
}, PR interface {
	*R
	xdr.Encoder
}](name string, cache bool, h handler[A, R]) sunrpc.Proc {
	return sunrpc.Proc{Name: name, Cache: cache, Handler: func(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error {
		var a A
		if PA(&a).Decode(args) != nil {
			return sunrpc.ErrGarbageArgs
		}
		var r R
		h(ctx, c, &a, &r)
		PR(&r).Encode(w)
		return nil
	}}
}

const (
	idempotent    = false
	nonIdempotent = true // goes through the duplicate request cache
)

// nfsProgram is the NFSv3 procedure table (RFC 1813 section 3.3).
func (s *Server) nfsProgram() *sunrpc.Program {
	procs := []sunrpc.Proc{
		nfs3.ProcNull:        {Name: "NULL", Handler: nullProc},
		nfs3.ProcGetattr:     proc[nfs3.FHArgs, nfs3.GetattrRes]("GETATTR", idempotent, s.getattr),
		nfs3.ProcSetattr:     proc[nfs3.SetattrArgs, nfs3.WccRes]("SETATTR", nonIdempotent, s.setattr),
		nfs3.ProcLookup:      proc[nfs3.DirOpArgs, nfs3.LookupRes]("LOOKUP", idempotent, s.lookup),
		nfs3.ProcAccess:      proc[nfs3.AccessArgs, nfs3.AccessRes]("ACCESS", idempotent, s.access),
		nfs3.ProcReadlink:    proc[nfs3.FHArgs, nfs3.ReadlinkRes]("READLINK", idempotent, s.readlink),
		nfs3.ProcRead:        {Name: "READ", Handler: s.read, MaxReply: maxIO + 4096},
		nfs3.ProcWrite:       proc[nfs3.WriteArgs, nfs3.WriteRes]("WRITE", nonIdempotent, s.write),
		nfs3.ProcCreate:      proc[nfs3.CreateArgs, nfs3.CreateRes]("CREATE", nonIdempotent, s.create),
		nfs3.ProcMkdir:       proc[nfs3.MkdirArgs, nfs3.CreateRes]("MKDIR", nonIdempotent, s.mkdir),
		nfs3.ProcSymlink:     proc[nfs3.SymlinkArgs, nfs3.CreateRes]("SYMLINK", nonIdempotent, s.symlink),
		nfs3.ProcMknod:       proc[nfs3.MknodArgs, nfs3.CreateRes]("MKNOD", nonIdempotent, s.mknod),
		nfs3.ProcRemove:      proc[nfs3.DirOpArgs, nfs3.WccRes]("REMOVE", nonIdempotent, s.remove),
		nfs3.ProcRmdir:       proc[nfs3.DirOpArgs, nfs3.WccRes]("RMDIR", nonIdempotent, s.rmdir),
		nfs3.ProcRename:      proc[nfs3.RenameArgs, nfs3.RenameRes]("RENAME", nonIdempotent, s.rename),
		nfs3.ProcLink:        proc[nfs3.LinkArgs, nfs3.LinkRes]("LINK", nonIdempotent, s.link),
		nfs3.ProcReaddir:     proc[nfs3.ReaddirArgs, nfs3.ReaddirRes]("READDIR", idempotent, s.readdir),
		nfs3.ProcReaddirplus: proc[nfs3.ReaddirplusArgs, nfs3.ReaddirRes]("READDIRPLUS", idempotent, s.readdirplus),
		nfs3.ProcFsstat:      proc[nfs3.FHArgs, nfs3.FsstatRes]("FSSTAT", idempotent, s.fsstat),
		nfs3.ProcFsinfo:      proc[nfs3.FHArgs, nfs3.FsinfoRes]("FSINFO", idempotent, s.fsinfo),
		nfs3.ProcPathconf:    proc[nfs3.FHArgs, nfs3.PathconfRes]("PATHCONF", idempotent, s.pathconf),
		nfs3.ProcCommit:      proc[nfs3.CommitArgs, nfs3.CommitRes]("COMMIT", idempotent, s.commit),
	}
	// Which calls run inline on the connection's reader (sunrpc.Proc.Inline): those
	// that never wait on a flush or on another call.
	for _, p := range []int{nfs3.ProcNull, nfs3.ProcGetattr, nfs3.ProcLookup, nfs3.ProcAccess, nfs3.ProcReadlink,
		nfs3.ProcRead, nfs3.ProcReaddir, nfs3.ProcReaddirplus, nfs3.ProcFsstat, nfs3.ProcFsinfo, nfs3.ProcPathconf} {
		procs[p].Inline = sunrpc.Always
	}
	for _, p := range []int{nfs3.ProcSetattr, nfs3.ProcCreate, nfs3.ProcMkdir, nfs3.ProcSymlink, nfs3.ProcMknod,
		nfs3.ProcRemove, nfs3.ProcRmdir, nfs3.ProcRename, nfs3.ProcLink} {
		procs[p].Inline = s.inlineIfAsync
	}
	procs[nfs3.ProcWrite].Inline = inlineWrite
	return &sunrpc.Program{Name: "nfs", Number: nfs3.Program, Versions: map[uint32][]sunrpc.Proc{nfs3.Version: procs}}
}

// nullProc is NULL (RFC 1813 section 3.3.0): do nothing.
func nullProc(ctx context.Context, c *sunrpc.Call, args *xdr.Reader, w *xdr.Writer) error { return nil }
