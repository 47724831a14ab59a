package mount

import (
	"time"

	"snfs/client"
	"snfs/mount/cachemgr"
)

// NewestConflicts is how many conflicts Status lists (all are counted).
const NewestConflicts = 5

// Status is what `snfs status MOUNTPOINT` shows of a mount (docs/mount.md,
// "Status"), as the mount process serves it in JSON on its stats socket
// (GET /status). Fields that do not apply to the mount's mode are null in
// JSON (nil here): snfs mode's in nfs mode, the oldest dirty data's age,
// which nfs mode does not track.
type Status struct {
	Time       time.Time        `json:"time"` // when taken
	MountPoint string           `json:"mount_point"`
	Mode       Mode             `json:"mode"`
	Server     string           `json:"server"` // the server's NFS address
	Export     string           `json:"export"`
	Connection StatusConnection `json:"connection"`
	Dirty      StatusDirty      `json:"dirty"`
	SNFS       *StatusSNFS      `json:"snfs"` // nil in nfs mode
}

// StatusConnection is whether the mount reaches its server
// (client.ReachState).
type StatusConnection struct {
	Connected bool      `json:"connected"`
	Since     time.Time `json:"since"`            // when Connected last changed (the mount's start before any change)
	Reason    string    `json:"reason,omitempty"` // why not connected
	// Recovering: the server restarted and the mount's recovery (reclaim,
	// reintegration of dirty files) has not ended; snfs mode.
	Recovering     bool `json:"recovering"`
	ServerRestarts int  `json:"server_restarts"` // server restarts the mount has seen; snfs mode
	// Offline: snfs mode's disconnected operation (--disconnected=auto)
	// took the server as gone: the mount serves its cache alone since
	// OfflineSince.
	Offline      bool      `json:"offline"`
	OfflineSince time.Time `json:"offline_since,omitzero"`
}

// StatusDirty is the data written on this mount and not yet stably on the
// server.
type StatusDirty struct {
	Bytes int64 `json:"bytes"`
	Files int   `json:"files"`
	// OldestSeconds is the age of the oldest dirty data (snfs mode's
	// delayed write-back; 0: none dirty); nil in nfs mode, which writes
	// back at close and does not track it.
	OldestSeconds *float64 `json:"oldest_seconds"`
}

// StatusSNFS is snfs mode's part of Status.
type StatusSNFS struct {
	CacheDir  string          `json:"cache_dir"`
	KeptOpens int             `json:"kept_opens"` // files whose opens are kept past their last close, until recalled
	Permits   StatusPermits   `json:"permits"`
	Log       StatusLog       `json:"log"`
	Conflicts StatusConflicts `json:"conflicts"`
}

// StatusPermits are the write-back permits held (docs/protocol.md section 21).
type StatusPermits struct {
	// InUse: the mount asks for permits. False: it makes every directory
	// change through the server (the permits are not wired into the mount
	// yet), and Held is 0.
	InUse bool                  `json:"in_use"`
	Held  int                   `json:"held"`
	Dirs  []cachemgr.PermitHeld `json:"dirs"`
}

// StatusLog is the client modification log (mount/cml's Stats: Coda's
// `cfs listcml`).
type StatusLog struct {
	InUse         bool    `json:"in_use"` // the mount logs its changes (false: empty, not wired into the mount yet)
	Records       int     `json:"records"`
	Bytes         int64   `json:"bytes"`
	OldestSeconds float64 `json:"oldest_seconds"` // age of the oldest record not reintegrated (0: none)
	Planned       int     `json:"planned"`        // of Records, those of the plan being reintegrated
}

// StatusConflicts are the conflicts kept in the cache directory (those
// `snfs conflicts` lists).
type StatusConflicts struct {
	Count  int                 `json:"count"`
	Newest []cachemgr.Conflict `json:"newest"` // at most NewestConflicts, newest first
	Error  string              `json:"error,omitempty"`
}

// Status returns the mount's status now. It makes no call to the server.
func (m *Mount) Status() Status {
	st := Status{Time: time.Now(), MountPoint: m.cfg.Dir, Mode: m.Mode, Server: m.cfg.Addr, Export: m.cfg.Export}
	var reach client.ReachState
	if sn, ok := cachemgr.StatusOf(m.FS, NewestConflicts); ok {
		reach = sn.Reach
		oldest := sn.DirtyOldest.Seconds()
		st.Dirty = StatusDirty{Bytes: sn.DirtyBytes, Files: sn.DirtyFiles, OldestSeconds: &oldest}
		s := &StatusSNFS{CacheDir: sn.CacheDir, KeptOpens: sn.KeptFiles,
			Permits: StatusPermits{InUse: sn.PermitsInUse, Held: len(sn.Permits), Dirs: sn.Permits},
			Log: StatusLog{InUse: sn.ModLogInUse, Records: sn.ModLog.Records, Bytes: sn.ModLog.Bytes,
				OldestSeconds: sn.ModLog.Oldest.Seconds(), Planned: sn.ModLog.Planned},
			Conflicts: StatusConflicts{Count: sn.Conflicts, Newest: sn.Newest, Error: sn.ConflictsErr}}
		if s.Permits.Dirs == nil {
			s.Permits.Dirs = []cachemgr.PermitHeld{}
		}
		if s.Conflicts.Newest == nil {
			s.Conflicts.Newest = []cachemgr.Conflict{}
		}
		st.SNFS = s
	} else {
		if m.reach != nil {
			reach = m.reach.State()
		}
		for _, n := range m.FS.Pending() {
			st.Dirty.Bytes += n
			st.Dirty.Files++
		}
	}
	st.Connection = StatusConnection{Connected: reach.Connected, Since: reach.Since, Reason: reach.Reason,
		Recovering: reach.Recovering, ServerRestarts: reach.ServerRestarts, Offline: reach.Offline, OfflineSince: reach.OfflineSince}
	return st
}
