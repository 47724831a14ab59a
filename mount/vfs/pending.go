package vfs

// Pending returns, for `snfs status`, the files whose written data this
// process holds in memory until the server has it stably: written and not
// yet sent, being sent, or sent UNSTABLE and not yet committed (a server
// crash before the COMMIT would lose it, and this client sends it again).
// Each file maps to its bytes. It makes no call and takes each inode's Mu
// briefly, as SyncCore does.
func (fs *FS) Pending() map[*Inode]int64 {
	// i.Mu is not taken under fs.Mu (SyncCore says why).
	fs.Mu.Lock()
	all := make([]*Inode, 0, len(fs.Inodes))
	for _, i := range fs.Inodes {
		all = append(all, i)
	}
	fs.Mu.Unlock()
	out := map[*Inode]int64{}
	for _, i := range all {
		i.Mu.Lock()
		if w := &i.WState; w.Pending() {
			n := w.Dirty.bytes() + w.inflight.bytes()
			for _, s := range w.Unstable {
				n += len(s.Data)
			}
			out[i] = int64(n)
		}
		i.Mu.Unlock()
	}
	return out
}
