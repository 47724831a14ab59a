package consist

import "snfs/state"

// PermitDirRemoved applies the removal of the directory fh by table client
// c (an RMDIR that succeeded, NFSv3's or a REINTEGRATE record's): c's own
// permit on it ends, a pending one is cancelled, another client's is
// recalled without waiting (state.Permits.Removed). A local process's
// removal comes through Changed (the directory's DELETE_SELF), which
// recalls.
func (d *Driver) PermitDirRemoved(c state.ClientID, fh []byte) {
	if fh == nil || !d.permits.Active() {
		return
	}
	d.doPermits(d.permits.Removed(d.now(), c, state.FileIDOf(fh)))
}
