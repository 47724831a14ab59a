package server

import (
	"syscall"

	"snfs/lockmgr"
	"snfs/nfs3"
	"snfs/snfs1"
	"snfs/state"
	"snfs/store"
	"snfs/sunrpc"
)

// snfsProgram is the procedure table of the snfs consistency protocol
// (docs/protocol.md): the same rows as NFSv3's, so its procedures get the same
// preamble (handle, export rights, squashing). OPEN, OPEN_NAME and CLOSE never
// wait (an OPEN that needs callbacks defers its reply and returns, as does an
// OPEN_NAME whose directory's permit is recalled first, as LOOKUP's), so they
// run inline; REGISTER and UNREGISTER write the registration durably, and RECLAIM
// applies up to snfs1.ReclaimMax items, so they do not. The replies of OPEN,
// OPEN_NAME and CLOSE are cached in memory only: they answer for the table's
// state, which a restart replaces (RECLAIM rebuilds it), so a reply saved
// before a restart would answer for a state the new server does not have.
// APPEND is a WRITE whose offset the server picks (append.go): it opens a
// descriptor and may wait for a flush, so it does not run inline either. Its
// reply is saved like a namespace change's: executed again after a restart, a
// retransmitted APPEND would place its data twice. The extended attributes
// changes (SETXATTR, REMOVEXATTR) are saved as SETATTR's are: executed again,
// a CREATE answers EXIST, a REMOVEXATTR NOXATTR, and a set undoes a later one.
// GETXATTR and LISTXATTRS are idempotent reads.
// ALLOCATE (allocate.go) is fallocate(2) made durable before the reply; its
// reply is saved too: executed again after a restart, a DEALLOCATE would zero
// what was written into its range since (the flush it already waits for makes
// the saving cheap, and the call is rare).
//
// GET_PERMIT (getpermit.go) defers its reply while other clients' directory
// promises are broken; its reply is cached in memory only (permits do not
// survive a restart). PERMIT_RELEASE may let changes held back by a recall
// go on, so it does not run inline. REINTEGRATE (reintegrate.go) applies up
// to snfs1.ReintegrateMax records; its reply is saved like a namespace
// change's, and its records are idempotent by LSN besides (a resend with a
// new xid, after the client restarted, applies nothing twice either).
//
// CREATE_OPEN (createopen.go) is CREATE and OPEN_WRITE of the new file: it
// has CREATE's preamble (the permit gate, the coexistence access of an
// UNCHECKED truncation) and CREATE's reply cache class, saved: executed again
// after a restart, a GUARDED one would answer EXIST to the client that made
// the file. The open in a reply replayed after a restart is one the new
// server does not count: a client that learned of the restart while the call
// was out opens the file again instead (docs/protocol.md, "CREATE_OPEN").
//
// LOCK, LOCKT and LOCKU (lock.go, lockt.go, locku.go) never wait: a blocked
// LOCK is answered LOCK_BLOCKED and granted by CB_GRANTED. The replies of LOCK
// and LOCKU are cached in memory only: locks do not survive a restart.
func (s *Server) snfsProgram(noCreateOpen bool) *sunrpc.Program {
	procs := []sunrpc.Proc{
		snfs1.ProcNull:     {Name: "NULL", Handler: nullProc},
		snfs1.ProcRegister: {Name: "REGISTER", Handler: s.register},
		snfs1.ProcOpen: nfsProc(s, op[snfs1.OpenArgs, snfs1.OpenRes]{Name: "OPEN", Cache: nonIdempotent, Inline: sunrpc.Always,
			FH: func(a *snfs1.OpenArgs) nfs3.FH { return a.File }, Reply: s.open}),
		snfs1.ProcOpenName: nfsProc(s, op[snfs1.OpenNameArgs, snfs1.OpenNameRes]{Name: "OPEN_NAME", Cache: nonIdempotent, Inline: sunrpc.Always,
			FH: func(a *snfs1.OpenNameArgs) nfs3.FH { return a.Where.Dir }, Reply: s.openName,
			Dirs: readDirs(func(a *snfs1.OpenNameArgs) nfs3.FH { return a.Where.Dir })}),
		snfs1.ProcClose: nfsProc(s, op[snfs1.CloseArgs, snfs1.CloseRes]{Name: "CLOSE", Cache: nonIdempotent, Inline: sunrpc.Always,
			FH: func(a *snfs1.CloseArgs) nfs3.FH { return a.File }, Gone: true, Handler: s.close}),
		snfs1.ProcReclaim:     {Name: "RECLAIM", Handler: s.reclaim},
		snfs1.ProcReclaimDone: {Name: "RECLAIM_DONE", Handler: s.reclaimDone},
		// Idempotent (a permit reclaimed again keeps its id) and sent
		// before RECLAIM_DONE on the reclaiming connection: not cached.
		snfs1.ProcReclaimPermit: {Name: "RECLAIM_PERMIT", Handler: s.reclaimPermit},
		snfs1.ProcUnregister:    {Name: "UNREGISTER", Handler: s.unregister},
		snfs1.ProcAppend: nfsProc(s, op[snfs1.AppendArgs, snfs1.AppendRes]{Name: "APPEND", Cache: nonIdempotentSaved,
			FH: func(a *snfs1.AppendArgs) nfs3.FH { return a.File }, Write: true, Handler: s.appendProc, Access: appendAccess, Changes: appendChanges,
			Applied: appendIntentApplied}),
		snfs1.ProcGetXattr: nfsProc(s, op[snfs1.GetXattrArgs, snfs1.GetXattrRes]{Name: "GETXATTR", Cache: idempotent,
			MaxReply: snfs1.XattrSizeMax + 64, FH: func(a *snfs1.GetXattrArgs) nfs3.FH { return a.File }, Handler: s.getXattr}),
		snfs1.ProcSetXattr: nfsProc(s, op[snfs1.SetXattrArgs, snfs1.SetXattrRes]{Name: "SETXATTR", Cache: nonIdempotentSaved,
			FH: func(a *snfs1.SetXattrArgs) nfs3.FH { return a.File }, Write: true, Handler: s.setXattr,
			Access: xattrAccess(func(a *snfs1.SetXattrArgs) []byte { return a.File })}),
		snfs1.ProcListXattrs: nfsProc(s, op[snfs1.ListXattrsArgs, snfs1.ListXattrsRes]{Name: "LISTXATTRS", Cache: idempotent,
			MaxReply: snfs1.XattrListMax + 64, FH: func(a *snfs1.ListXattrsArgs) nfs3.FH { return a.File }, Handler: s.listXattrs}),
		snfs1.ProcRemoveXattr: nfsProc(s, op[snfs1.RemoveXattrArgs, snfs1.RemoveXattrRes]{Name: "REMOVEXATTR", Cache: nonIdempotentSaved,
			FH: func(a *snfs1.RemoveXattrArgs) nfs3.FH { return a.File }, Write: true, Handler: s.removeXattr,
			Access: xattrAccess(func(a *snfs1.RemoveXattrArgs) []byte { return a.File })}),
		snfs1.ProcAllocate: nfsProc(s, op[snfs1.AllocateArgs, snfs1.AllocateRes]{Name: "ALLOCATE", Cache: nonIdempotentSaved,
			Check: allocateCheck, FH: func(a *snfs1.AllocateArgs) nfs3.FH { return a.File }, Write: true,
			Handler: s.allocateProc, Access: allocateAccess, Changes: allocateChanges}),
		snfs1.ProcLock: nfsProc(s, op[snfs1.LockArgs, snfs1.LockRes]{Name: "LOCK", Cache: nonIdempotent,
			FH: func(a *snfs1.LockArgs) nfs3.FH { return a.File }, Handler: s.lock,
			Gate: func(s *Server, c *sunrpc.Call, a *snfs1.LockArgs, proceed func(func())) {
				s.delegs.admit(lockmgr.FileKey(a.File), s.delegCaller(a.Client), proceed)
			}}),
		snfs1.ProcLockT: nfsProc(s, op[snfs1.LockTArgs, snfs1.LockRes]{Name: "LOCKT", Cache: idempotent,
			FH: func(a *snfs1.LockTArgs) nfs3.FH { return a.File }, Handler: s.lockt,
			Gate: func(s *Server, c *sunrpc.Call, a *snfs1.LockTArgs, proceed func(func())) {
				s.delegs.admit(lockmgr.FileKey(a.File), s.delegCaller(a.Client), proceed)
			}}),
		snfs1.ProcLockU: nfsProc(s, op[snfs1.LockUArgs, snfs1.StatusRes]{Name: "LOCKU", Cache: nonIdempotent,
			FH: func(a *snfs1.LockUArgs) nfs3.FH { return a.File }, Gone: true, Handler: s.locku}),
		snfs1.ProcListDir: nfsProc(s, op[snfs1.ListDirArgs, snfs1.ListDirRes]{Name: "LISTDIR", Cache: idempotent, Inline: sunrpc.Always,
			FH: func(a *snfs1.ListDirArgs) nfs3.FH { return a.Dir }, Handler: s.listDirProc, Dirs: readDirs(func(a *snfs1.ListDirArgs) nfs3.FH { return a.Dir })}),
		snfs1.ProcDirRelease: {Name: "DIR_RELEASE", Handler: s.dirRelease, Inline: sunrpc.Always},
		snfs1.ProcGetPermit: nfsProc(s, op[snfs1.GetPermitArgs, snfs1.GetPermitRes]{Name: "GET_PERMIT", Cache: nonIdempotent,
			FH: func(a *snfs1.GetPermitArgs) nfs3.FH { return a.Dir }, Write: true, Reply: s.getPermit}),
		snfs1.ProcPermitRelease: {Name: "PERMIT_RELEASE", Handler: s.permitRelease},
		snfs1.ProcCreateOpen: nfsProc(s, op[snfs1.CreateOpenArgs, snfs1.CreateOpenRes]{Name: "CREATE_OPEN", Cache: nonIdempotentSaved, Inline: s.inlineIfAsync,
			FH: func(a *snfs1.CreateOpenArgs) nfs3.FH { return a.Create.Where.Dir }, Write: true, Reply: s.createOpen,
			Access: createOpenAccess, Dirs: func(a *snfs1.CreateOpenArgs) []nfs3.FH { return []nfs3.FH{a.Create.Where.Dir} }}),
		snfs1.ProcReintegrate: {Name: "REINTEGRATE", Handler: s.reintegrate, Cache: true, Persist: true,
			MaxReply: snfs1.ReintegrateMax*reintegrateResultMax + 64},
	}
	if noCreateOpen {
		procs[snfs1.ProcCreateOpen] = sunrpc.Proc{} // PROC_UNAVAIL
	}
	return &sunrpc.Program{Name: "snfs", Number: snfs1.Program, Versions: map[uint32][]sunrpc.Proc{snfs1.Version: procs}}
}

// mayOpen checks that the caller may open r in mode: a regular file, readable
// or writable by the caller, writable export for WRITE.
func (s *Server) mayOpen(r *req, mode state.Mode) error {
	switch r.node.Stat.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
	case syscall.S_IFDIR:
		return nfs3.ErrIsDir
	default:
		return nfs3.ErrInval
	}
	write := mode == state.Write
	if write && r.opts.ReadOnly {
		return errROFS
	}
	if err := s.store.OpenIO(r.node); err != nil {
		return err
	}
	return store.As(r.cred, func() error { return s.store.MayIO(r.node, r.cred.UID, write) })
}
