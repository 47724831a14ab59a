package vfs

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"snfs/nlm4"
	"snfs/nsm"
	"snfs/sunrpc"
)

// Lock reclaim in nfs mode (docs/mount.md, "Locks after a server restart"). A
// Linux NFS client learns that its server restarted from the server's
// SM_NOTIFY to its own status monitor (rpc.statd); a mount runs none, so it
// asks the server's: SM_STAT returns the server's NSM state number, which the
// server advances at every start (snfs serve, and rpc.statd at every boot).
// The mount asks when it starts, every NLMConfig.Poll, and at once when an NLM
// call fails or is answered NLM4_DENIED_GRACE_PERIOD (the server is in a grace
// period: it just started). A number other than the last one means the server
// restarted and lost its locks: the mount sends every lock it holds again, as a
// non-blocking NLM LOCK with reclaim TRUE, which the server grants in its grace
// period. A lock the server refuses (its grace period was over, another host
// holds it) is lost: the descriptors through which its owner locked the file
// fail their I/O with EIO (locklost.go).

// nlmWatch is an nfs mode mount's watch of the server's state number. Its
// goroutine is tracked by wg and ends with the mount's life.
type nlmWatch struct {
	rpc     *sunrpc.Client // the server's NSM
	monName string         // the name SM_STAT asks about: the server's
	kick    chan struct{}  // capacity 1: ask now
	// mu is held shared by a lock request across its NLM call and the
	// bookkeeping of its answer (noteRange), and exclusively by a reclaim:
	// so a reclaim never sends again a range being unlocked, and never
	// misses one just granted.
	mu    sync.RWMutex
	state int32 // the server's last state number; only the goroutine uses it
	known bool  // state is known
	wg    sync.WaitGroup
}

// startNLMWatch connects to the server's NSM and starts the watch; without
// NLMConfig.NSMAddr locks are not reclaimed after a server restart.
func (fs *FS) startNLMWatch(ctx context.Context) {
	nl := fs.nl
	w := &nlmWatch{kick: make(chan struct{}, 1)}
	nl.watch = w
	if nl.cfg.NSMAddr == "" {
		fs.log.Warn("NLM: the server's status monitor (NSM) is not known: locks are not reclaimed after a server restart")
		return
	}
	c, err := sunrpc.Dial(ctx, "tcp", nl.cfg.NSMAddr, nsm.Program, nsm.Version, sunrpc.WithTimeout(5*time.Second))
	if err != nil {
		fs.log.Warn("NLM: the server's status monitor (NSM): locks are not reclaimed after a server restart", "addr", nl.cfg.NSMAddr, "err", err)
		return
	}
	w.rpc = c
	w.monName, _, _ = net.SplitHostPort(nl.cfg.NSMAddr)
	fs.nlmCheckServer()
	w.wg.Add(1)
	go fs.nlmWatchLoop()
}

// stopNLMWatch ends the watch (after the mount's life ended) and closes its
// connection.
func (fs *FS) stopNLMWatch() {
	w := fs.nl.watch
	if w == nil || w.rpc == nil {
		return
	}
	w.wg.Wait()
	w.rpc.Close()
}

// kickNow asks the watch to look at the server's state number now.
func (w *nlmWatch) kickNow() {
	if w == nil {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (fs *FS) nlmWatchLoop() {
	nl := fs.nl
	w := nl.watch
	defer w.wg.Done()
	t := time.NewTicker(nl.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-nl.life.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
		fs.nlmCheckServer()
	}
}

// nlmCheckServer asks the server's state number and reclaims the locks if
// it changed. A reclaim that fails (the connection) is tried again at the
// next look.
func (fs *FS) nlmCheckServer() {
	nl := fs.nl
	w := nl.watch
	ctx, cancel := context.WithTimeout(nl.life, 30*time.Second)
	defer cancel()
	var res nsm.StatRes
	if err := w.rpc.Call(ctx, nsm.ProcStat, &nsm.StatArgs{MonName: w.monName}, &res); err != nil {
		fs.log.Debug("NSM SM_STAT of the server", "err", err)
		return
	}
	if !w.known || res.State == w.state {
		w.state, w.known = res.State, true
		return
	}
	fs.log.Info("the server restarted (its NSM state number changed): reclaiming this mount's locks",
		"old_state", w.state, "state", res.State)
	if err := fs.nlmReclaim(ctx); err != nil {
		fs.log.Warn("NLM reclaim after the server restarted; trying again", "err", err)
		return
	}
	w.state = res.State
}

// nlmReclaim sends every lock held again with reclaim TRUE. An owner of a
// file whose ranges are not all taken back has lost its locks of the file.
func (fs *FS) nlmReclaim(ctx context.Context) error {
	nl := fs.nl
	w := nl.watch
	var lostFiles []*Inode
	defer func() {
		for _, i := range lostFiles {
			fs.NotifyData(i) // no FUSE request of these files waits for the reclaim
		}
	}()
	w.mu.Lock()
	defer w.mu.Unlock()
	held := nl.locks.SnapshotRanges()
	lost := 0
	for _, h := range held {
		why := ""
		for _, s := range h.Spans {
			off, n := s.OffLen()
			st, err := nl.c.Reclaim(ctx, nl.lock(h.Inode, h.Owner, off, n), s.Write)
			if err != nil {
				return err
			}
			if st != nlm4.Granted {
				why = fmt.Sprint(st)
				break
			}
		}
		if why == "" {
			continue
		}
		lost++
		fs.log.Warn("a lock was not reclaimed after the server restarted: its descriptors' reads and writes fail with EIO until they unlock",
			"fileid", h.Inode.FileID, "owner", h.Owner, "answer", why)
		if nl.locks.OwnerLost(h.Inode, h.Owner) {
			lostFiles = append(lostFiles, h.Inode)
		}
	}
	fs.log.Info("NLM locks reclaimed after the server restarted", "owners", len(held)-lost, "lost", lost)
	return nil
}
