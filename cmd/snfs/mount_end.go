package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"snfs/mount/fusefs"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Bounds of a mount's end. unmountTimeout is how long a normal unmount may
// wait for the mount to go idle before it is detached and aborted;
// writeBackTimeout bounds the write-back that follows.
const (
	unmountTimeout   = 30 * time.Second
	writeBackTimeout = 5 * time.Minute
)

// mountEnd is how a mount process ends: unmounted from outside (snfs
// umount), or by itself on SIGTERM, SIGINT or SIGHUP. The first signal unmounts,
// forcing it when the mount stays busy or a request is wedged (on a server
// that is gone, say); a signal during the write-back that follows abandons
// it, so that a mount whose server is gone can always be stopped.
type mountEnd struct {
	log  *slog.Logger
	dir  string
	sigs chan os.Signal // SIGTERM, SIGINT and SIGHUP from newMountEnd on
}

func newMountEnd(log *slog.Logger, dir string) *mountEnd {
	e := &mountEnd{log: log, dir: dir, sigs: make(chan os.Signal, 1)}
	signal.Notify(e.sigs, syscall.SIGTERM, syscall.SIGINT)
	// SIGHUP too: the terminal of a --foreground mount closed. Its default
	// action ended the process without unmounting, leaving a dead mount
	// ("transport endpoint is not connected") and, in nfs mode, losing what
	// was not yet flushed. Not under nohup, whose ignoring it Notify would
	// undo.
	if !signal.Ignored(syscall.SIGHUP) {
		signal.Notify(e.sigs, syscall.SIGHUP)
	}
	return e
}

// serve returns once the mount served by srv is gone. A forced unmount
// calls stopServing, which must cancel what the handlers wait on: an
// aborted FUSE connection interrupts none of them, and the serve loop ends
// only when they return.
func (e *mountEnd) serve(srv *fuse.Server, stopServing func()) {
	served := make(chan struct{})
	go func() { srv.Wait(); close(served) }()
	select {
	case <-served:
		return
	case s := <-e.sigs:
		e.log.Info("unmounting", "signal", s.String())
	}
	err := fusefs.UnmountOrAbort(e.dir, srv, unmountTimeout, func() {
		e.log.Warn("the mount stayed busy: detached it, aborted its FUSE connection and cancelled the requests in flight",
			"on", e.dir)
		stopServing()
	})
	if err == nil {
		<-served
		return
	}
	e.log.Warn("unmount", "err", err)
	select {
	case <-served:
	case <-time.After(time.Second):
		// A handler that ignores cancellation; the process ends anyway.
		e.log.Error("requests still in flight after the forced unmount", "on", e.dir)
	}
}

// writeBackContext is the context for the write-back at unmount: it ends
// after writeBackTimeout, or at the next SIGTERM or SIGINT, which logs lost
// (what abandoning the write-back leaves behind). stop releases it.
func (e *mountEnd) writeBackContext(life context.Context, lost string) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithTimeout(life, writeBackTimeout)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-e.sigs:
			e.log.Warn("write-back at unmount abandoned: "+lost, "signal", s.String(), "on", e.dir)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel()
		<-done
		signal.Stop(e.sigs)
	}
}
