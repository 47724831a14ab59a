package vfs

import "math"

// Lock reclaim (docs/protocol.md, "Server restart"; docs/mount.md, "Locks
// after a server restart"): the mount keeps the byte ranges each lock owner
// holds on each file, as the server's lock manager does, and after a server
// restart sends them all again with reclaim = TRUE in the server's grace
// period - in snfs mode inside the session's reclaim, before RECLAIM_DONE; in
// nfs mode as NLM reclaims once the server's NSM state number changed
// (nlmreclaim.go). A lock the server does not take back (its grace period was
// over, another client holds it) is lost: the descriptors through which its
// owner locked the file fail their I/O with EIO (locklost.go), and the owner's
// ranges are forgotten.

// heldSpan is a range [start, end] (end inclusive) an owner holds, of one
// type.
type heldSpan struct {
	start, end uint64
	Write      bool
}

// spanOf is the range of a lock request's (off, n): n 0, or a length past
// 2^64-1, runs to the end.
func spanOf(off, n uint64, write bool) heldSpan {
	end := uint64(math.MaxUint64)
	if n != 0 && n-1 <= math.MaxUint64-off {
		end = off + n - 1
	}
	return heldSpan{off, end, write}
}

// OffLen is s as a lock request's offset and length.
func (s heldSpan) OffLen() (off, n uint64) {
	if s.end == math.MaxUint64 {
		return s.start, 0
	}
	return s.start, s.end - s.start + 1
}

// setSpan returns spans with r set (unlock: removed), POSIX semantics for one
// owner: r replaces what it covers, a span it cuts is split, and adjacent
// spans of one type are merged. spans is sorted and disjoint, and so is the
// result (a new slice).
func setSpan(spans []heldSpan, r heldSpan, unlock bool) []heldSpan {
	out := make([]heldSpan, 0, len(spans)+2)
	placed := unlock
	for _, s := range spans {
		if !placed && r.start <= s.start {
			out = append(out, r)
			placed = true
		}
		if s.end < r.start || r.end < s.start {
			out = append(out, s)
			continue
		}
		if s.start < r.start {
			out = append(out, heldSpan{s.start, r.start - 1, s.Write})
		}
		if s.end > r.end {
			if !placed {
				out = append(out, r)
				placed = true
			}
			out = append(out, heldSpan{r.end + 1, s.end, s.Write})
		}
	}
	if !placed {
		out = append(out, r)
	}
	merged := out[:0]
	for _, s := range out {
		if n := len(merged); n > 0 && merged[n-1].Write == s.Write && merged[n-1].end != math.MaxUint64 && merged[n-1].end+1 == s.start {
			merged[n-1].end = s.end
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// NoteRange records that owner's request on (off, n) of i was carried out:
// a lock granted (write or read), or an unlock.
func (l *LockTable) NoteRange(i *Inode, owner uint64, off, n uint64, write, unlock bool) {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	if l.ranges == nil {
		l.ranges = map[*Inode]map[uint64][]heldSpan{}
	}
	byOwner := l.ranges[i]
	spans := setSpan(byOwner[owner], spanOf(off, n, write), unlock)
	if len(spans) == 0 {
		l.dropRangesLocked(i, owner)
		return
	}
	if byOwner == nil {
		byOwner = map[uint64][]heldSpan{}
		l.ranges[i] = byOwner
	}
	byOwner[owner] = spans
}

// dropRangesLocked forgets owner's ranges on i. l.Mu held.
func (l *LockTable) dropRangesLocked(i *Inode, owner uint64) {
	delete(l.ranges[i], owner)
	if len(l.ranges[i]) == 0 {
		delete(l.ranges, i)
	}
}

// heldRanges is what the owners hold: one entry per (file, owner).
type heldRanges struct {
	Inode *Inode
	Owner uint64
	Spans []heldSpan
}

// SnapshotRanges returns every owner's ranges (to reclaim them).
func (l *LockTable) SnapshotRanges() []heldRanges {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	var out []heldRanges
	for i, byOwner := range l.ranges {
		for o, spans := range byOwner {
			out = append(out, heldRanges{i, o, append([]heldSpan(nil), spans...)})
		}
	}
	return out
}

// OwnerLost marks the descriptors through which owner locked i lost and
// forgets owner's ranges on i: the server did not take them back. It returns
// whether a descriptor was marked.
func (l *LockTable) OwnerLost(i *Inode, owner uint64) bool {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	l.dropRangesLocked(i, owner)
	marked := false
	for f, h := range l.Held {
		if f.I == i && h.owners[owner] && !h.Lost {
			h.Lost = true
			marked = true
		}
	}
	return marked
}

// TakeLostNotify returns (and forgets) the files whose locks the reclaim
// found lost.
func (l *LockTable) TakeLostNotify() []*Inode {
	l.Mu.Lock()
	defer l.Mu.Unlock()
	is := l.LostNotify
	l.LostNotify = nil
	return is
}
