package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"snfs/mount/cachemgr"
	"snfs/mount/vfs"
)

// watchDisconnectRequests makes the mount go offline on SIGUSR1 and come
// back on SIGUSR2 (docs/mount.md, "Disconnected operation": Coda's
// `cfs disconnect` and `cfs reconnect`), for a mount with
// --disconnected=auto. stop ends the watch (its goroutine returns).
func watchDisconnectRequests(log *slog.Logger, fs *vfs.FS) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case s := <-sigs:
				off := s == syscall.SIGUSR1
				if err := cachemgr.SetDisconnected(fs, off); err != nil {
					log.Warn("disconnect request ignored", "signal", s.String(), "err", err)
					continue
				}
				log.Info("disconnected operation requested", "signal", s.String(), "offline", off)
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		<-ended
	}
}
