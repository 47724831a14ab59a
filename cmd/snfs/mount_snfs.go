package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"snfs/metrics"
	"snfs/mount/fusefs"
	"snfs/mount/vfs"
)

// defaultCacheDir is /var/cache/snfs/<hash of SERVER:/EXPORT>; for a user
// other than root, who cannot write there, snfs/<hash> under the user's cache
// directory ($XDG_CACHE_HOME or ~/.cache).
func defaultCacheDir(host, export string) string {
	h := sha256.Sum256([]byte(host + ":" + export))
	base := "/var/cache/snfs"
	if d, err := os.UserCacheDir(); err == nil && os.Geteuid() != 0 {
		base = filepath.Join(d, "snfs")
	}
	return filepath.Join(base, hex.EncodeToString(h[:8]))
}

// parseSize parses a byte count with an optional K, M, G or T suffix
// (powers of 1024).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	if n := len(s); n > 0 {
		switch strings.ToUpper(s[n-1:]) {
		case "K":
			mult = 1 << 10
		case "M":
			mult = 1 << 20
		case "G":
			mult = 1 << 30
		case "T":
			mult = 1 << 40
		}
		if mult != 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional K, M, G or T", s)
	}
	return v * mult, nil
}

// runSNFSMount is runMount in snfs mode.
func runSNFSMount(life, ctx context.Context, log *slog.Logger, f mountFlags, host, export, dir, nfsAddr string, reg *metrics.Client) error {
	size, err := parseSize(f.cacheSize)
	if err != nil {
		return fmt.Errorf("--cache-size: %w", err)
	}
	cacheDir := f.cacheDir
	if cacheDir == "" {
		cacheDir = defaultCacheDir(host, export)
	}
	hostname, err := os.Hostname()
	if err != nil {
		return err
	}
	cfg := vfs.SNFSMountConfig{Addr: nfsAddr, Export: export, Name: hostname + ":" + dir,
		CacheDir: cacheDir, CacheSize: size, WriteBackDelay: f.writebackDelay,
		CloseDelay: f.closeDelay, Logger: log, MountPoint: dir, ReadOnly: f.readOnly}
	cfg.Observer = reg
	v, err := vfs.OpenSNFS(ctx, cfg)
	if err != nil {
		return err
	}
	clientMetrics(reg, v)
	if f.metrics != "" {
		stopMetrics, err := serveMetrics(f.metrics, reg, log)
		if err != nil {
			v.Close()
			return err
		}
		defer stopMetrics()
	}
	serving, stopServing := context.WithCancel(life)
	defer stopServing()
	srv, err := fusefs.Mount(serving, dir, v, fusefs.Options{FsName: host + ":" + export, Debug: f.debug,
		Passthrough: f.passthrough, NoExec: f.noExec})
	if err != nil {
		v.Close()
		return err
	}
	defer writePidFile(dir)()
	defer serveStatsSocket(dir, reg, log)()
	writeCacheDirFile(dir, cacheDir)
	log.Info("mounted", "export", host+":"+export, "on", dir, "mode", "snfs", "cache_dir", cacheDir)
	ready(nil)

	end := newMountEnd(log, dir)
	end.serve(srv, stopServing)
	// Unmount writes everything back.
	sctx, sstop := end.writeBackContext(life, "dirty files stay in the cache directory "+cacheDir+
		" and are written back by the next mount with it")
	defer sstop()
	serr := v.Sync(sctx)
	if serr != nil {
		log.Error("write-back at unmount", "err", serr)
	}
	if err := v.Close(); err != nil {
		log.Warn("close", "err", err)
	}
	if serr != nil {
		return fmt.Errorf("write-back at unmount: %w", serr)
	}
	log.Info("unmounted", "on", dir)
	return nil
}
