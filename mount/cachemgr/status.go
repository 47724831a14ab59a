package cachemgr

import (
	"slices"
	"sync/atomic"
	"time"

	"snfs/client"
	"snfs/mount/cml"
	"snfs/mount/vfs"
)

// What `snfs status MOUNTPOINT` shows of snfs mode (docs/mount.md,
// "Status"): the session's reachability, the data written here and not yet
// on the server, the write-back permits held and the modification log
// (Coda's `cfs lsv` and `cfs listcml`), the conflicts kept. It makes no
// call to the server and takes locks only briefly (never one held across an
// RPC), so that it answers while the server is gone.
//
// The permits and the log are in use with --permits=on (permits.go sets
// their sources with SetStatusSources); otherwise Status reports none held
// and an empty log, marked not in use.

// PermitHeld is one write-back permit the mount holds.
type PermitHeld struct {
	Dir    string    `json:"dir"`    // the directory's path under the mount point, as last seen
	DirFH  string    `json:"dir_fh"` // its handle (hex)
	Permit uint64    `json:"permit"` // the server's permit id
	Since  time.Time `json:"since"`  // when granted
}

// StatusSources are the parts of Status that come from the write-back
// permits and the modification log. Nil fields: not in use.
type StatusSources struct {
	Permits func() []PermitHeld // the permits held now
	ModLog  func() cml.Stats    // the log's length, bytes and age
}

// statusSources holds an FS's StatusSources (snfsFS.status).
type statusSources struct {
	p atomic.Pointer[StatusSources]
}

// SetStatusSources makes fs's Status read the permits and the log from
// src: called by whatever gives the mount its permits and log, once they
// exist. fs is in snfs mode.
func SetStatusSources(fs *vfs.FS, src StatusSources) {
	mgrOf(fs).status.p.Store(&src)
}

// Status is snfs mode's part of a mount's status.
type Status struct {
	Reach client.ReachState
	// DirtyBytes and DirtyFiles: data written here and not yet stably on
	// the server: the cache directory's dirty ranges waiting for
	// write-back, the data of files written through (write-shared, or
	// not opened with the protocol) held in memory until committed, and
	// the local data of files made locally, until it is on the server
	// (--permit-data=on, offlinedata.go).
	DirtyBytes int64
	DirtyFiles int
	// DirtyOldest is the age of the oldest dirty file's first dirty write
	// since its last write-back (0: none dirty; files written through do
	// not count, their data waits at most until their close).
	DirtyOldest time.Duration
	// PermitsInUse: the mount asks for write-back permits (a source is
	// set); Permits are those held.
	PermitsInUse bool
	Permits      []PermitHeld
	// ModLogInUse: the mount logs its changes (a source is set); ModLog is
	// the log's Stats.
	ModLogInUse bool
	ModLog      cml.Stats
	CacheDir    string
	// KeptFiles counts the files whose opens this mount keeps past their
	// last close until the server recalls them (docs/protocol.md section
	// 10): their reopening costs no call.
	KeptFiles int
	// Conflicts counts the conflicts listed in the cache directory (those
	// `snfs conflicts` lists); Newest are the newest of them, newest
	// first; ConflictsErr is why they could not be read ("": read).
	Conflicts    int
	Newest       []Conflict
	ConflictsErr string
}

// StatusOf returns the status of fs, which is in snfs mode (false: it is
// not), with at most newest of its conflicts.
func StatusOf(fs *vfs.FS, newest int) (Status, bool) {
	sn, ok := fs.Ops().(*snfsFS)
	if !ok {
		return Status{}, false
	}
	now := time.Now()
	st := Status{Reach: sn.sess.Reach(), CacheDir: sn.cfg.CacheDir, KeptFiles: sn.KeptFiles()}
	sn.mu.Lock()
	files := make(map[*vfs.Inode]bool, len(sn.dirty))
	var oldest time.Time
	for i, since := range sn.dirty {
		files[i] = true
		if oldest.IsZero() || since.Before(oldest) {
			oldest = since
		}
	}
	sn.mu.Unlock()
	if !oldest.IsZero() {
		st.DirtyOldest = max(now.Sub(oldest), 0)
	}
	st.DirtyBytes = sn.DirtyBytes()
	for i, n := range sn.FS.Pending() {
		files[i] = true
		st.DirtyBytes += n
	}
	st.DirtyFiles = len(files)
	if sn.permits != nil {
		// Files made locally keep their data in the local store until
		// their reintegration (--permit-data=on, offlinedata.go): not on
		// the server either.
		n, k := sn.permits.offDataPending()
		st.DirtyBytes += n
		st.DirtyFiles += k
	}
	if src := sn.status.p.Load(); src != nil {
		if src.Permits != nil {
			st.PermitsInUse, st.Permits = true, src.Permits()
		}
		if src.ModLog != nil {
			st.ModLogInUse, st.ModLog = true, src.ModLog()
		}
	}
	if st.CacheDir != "" {
		list, err := ReadConflicts(st.CacheDir)
		if err != nil {
			st.ConflictsErr = err.Error()
		}
		st.Conflicts = len(list)
		// The file is appended to as conflicts are kept: the last are the newest.
		list = list[max(len(list)-newest, 0):]
		slices.Reverse(list)
		st.Newest = list
	}
	return st, true
}
