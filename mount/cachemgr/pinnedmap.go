package cachemgr

import (
	"context"
	"hash/maphash"
)

// Writes through shared mappings of a pinned file. The kernel maps the
// cache file itself (passthrough), and a store into the mapping raises no
// fanotify event: neither the handler nor the landed ranges see it. So the
// mount keeps a hash of every page of the cache file as it was last sent to
// the server or refreshed from it (taken at the pinned mode's entry, right
// after the whole file was written back, and kept up to date by every send,
// refresh and size change of its own). At a close or an fsync, which must
// not return before the application's writes are on the server, it hashes
// the file's pages again and sends every page that differs: only this
// client's stores can have changed them, since other clients' bytes enter
// the cache file through the refresh. The scan reads the whole file, which
// is why it is left to closes and fsyncs, not done at every callback. Before
// an access's refresh lays the server's bytes over a range, the pages of
// that range are scanned the same way and the changed ones sent: a read or
// write through the file after stores through a mapping would otherwise
// overwrite them with the server's older bytes, losing them (a store racing
// the refresh itself, from another thread, is the one left unprotected).

// pinPage is the granularity of the page hashes.
const pinPage = 4096

// pageSums are the hashes of a cache file's pages, by page index.
type pageSums struct {
	seed maphash.Seed
	sum  map[uint64]uint64
	size uint64 // the cache file's size at the last resum
}

func (ps *pageSums) init() {
	if ps.sum == nil {
		ps.seed, ps.sum = maphash.MakeSeed(), map[uint64]uint64{}
	}
}

// resumLocked records the hashes of the pages r overlaps as the cache file
// holds them now; pages past its end are forgotten.
func (pf *pinnedFile) resumLocked(r span) {
	pf.sums.init()
	st, err := pf.fd.Stat()
	if err != nil {
		return
	}
	size := uint64(st.Size())
	if size < pf.sums.size {
		for p := range pf.sums.sum {
			if p*pinPage >= size {
				delete(pf.sums.sum, p)
			}
		}
	}
	pf.sums.size = size
	pf.hashPagesLocked(r.off&^(pinPage-1), min(r.end(), size), func(p, h uint64) { pf.sums.sum[p] = h })
}

// hashPagesLocked hashes the cache file's pages from lo (a page boundary)
// to end, the page end covers included whole (as far as the file goes), and
// calls fn with each page's index and hash.
func (pf *pinnedFile) hashPagesLocked(lo, end uint64, fn func(p, h uint64)) {
	if lo >= end {
		return
	}
	buf := make([]byte, min(1<<20, (end-lo+pinPage-1)&^(pinPage-1)))
	for off := lo; off < end; {
		want := min(uint64(len(buf)), (end-off+pinPage-1)&^(pinPage-1))
		n, _ := pf.fd.ReadAt(buf[:want], int64(off))
		if n == 0 {
			return
		}
		for i := 0; i < n; i += pinPage {
			fn((off+uint64(i))/pinPage, maphash.Bytes(pf.sums.seed, buf[i:min(i+pinPage, n)]))
		}
		off += uint64(n)
	}
}

// sumLocked records the hashes of the pages data (the cache file's bytes at
// off, just read or written) covers whole; a partial page at either end is
// read back from the file (it may hold more than data).
func (pf *pinnedFile) sumLocked(off uint64, data []byte) {
	pf.sums.init()
	end := off + uint64(len(data))
	lo := (off + pinPage - 1) &^ (pinPage - 1)
	hi := end &^ (pinPage - 1)
	if off < lo {
		pf.resumLocked(span{off, 1})
	}
	for p := lo; p < hi; p += pinPage {
		pf.sums.sum[p/pinPage] = maphash.Bytes(pf.sums.seed, data[p-off:p-off+pinPage])
	}
	if hi < end && hi >= lo {
		pf.resumLocked(span{hi, end - hi})
	}
}

// pinScanLocked sends the pages of the cache file that r overlaps whose hash
// changed since they were last sent or refreshed.
func (sn *snfsFS) pinScanLocked(ctx context.Context, pf *pinnedFile, r span) error {
	fs := sn.FS
	pf.sums.init()
	st, err := pf.fd.Stat()
	if err != nil {
		return err
	}
	var changed []span
	pf.hashPagesLocked(r.off&^(pinPage-1), min(r.end(), uint64(st.Size())), func(p, h uint64) {
		if old, ok := pf.sums.sum[p]; ok && old == h {
			return
		}
		if k := len(changed) - 1; k >= 0 && changed[k].end() == p*pinPage {
			changed[k].n += pinPage
		} else {
			changed = append(changed, span{p * pinPage, pinPage})
		}
	})
	for _, r := range changed {
		if err := sn.pinSendLocked(ctx, pf, r); err != nil {
			return err
		}
	}
	if len(changed) > 0 {
		fs.Logger().Debug("passthrough: pages written through a mapping sent", "fileid", pf.i.FileID, "ranges", len(changed))
	}
	return nil
}
