package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"snfs/mount"
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

// snfsConfig fills in cfg's snfs mode settings from the flags: the cache
// directory (given or the default), its size bound, the delays, the session's
// name (HOSTNAME:MOUNTPOINT). fresh tells whether the cache directory holds no
// index yet (a failed first mount removes what it made: dropFreshCacheDir).
func snfsConfig(cfg *mount.Config, f mountFlags, host, export, dir string) (cacheDir string, fresh bool, err error) {
	size, err := parseSize(f.cacheSize)
	if err != nil {
		return "", false, fmt.Errorf("--cache-size: %w", err)
	}
	cacheDir = f.cacheDir
	if cacheDir == "" {
		cacheDir = defaultCacheDir(host, export)
	}
	hostname, err := os.Hostname()
	if err != nil {
		return "", false, err
	}
	cfg.Name, cfg.CacheDir, cfg.CacheSize = hostname+":"+dir, cacheDir, size
	cfg.WriteBackDelay, cfg.CloseDelay, cfg.KeptOpens = f.writebackDelay, time.Duration(f.closeDelay), f.keptOpens
	switch f.disconnected {
	case "auto":
		cfg.Disconnected, cfg.DisconnectAfter = true, f.disconnectAfter
	case "never", "":
	default:
		return "", false, fmt.Errorf("--disconnected=%q: auto or never", f.disconnected)
	}
	switch f.permits {
	case "on":
		cfg.Permits = true
	case "off", "":
	default:
		return "", false, fmt.Errorf("--permits=%s: on or off", f.permits)
	}
	switch f.permitData {
	case "on":
		cfg.PermitData = true
	case "off", "":
	default:
		return "", false, fmt.Errorf("--permit-data=%s: on or off", f.permitData)
	}
	_, statErr := os.Stat(filepath.Join(cacheDir, "index.db"))
	return cacheDir, errors.Is(statErr, fs.ErrNotExist), nil
}

// dropFreshCacheDir removes what a failed first mount made in its cache
// directory (the index and the empty data directory: nothing was mounted, so
// nothing was cached), and the directory if that empties it: a mistyped
// export leaves nothing in /var/cache/snfs. A log file in it is the
// detaching parent's to drop (dropEmptyLog).
func dropFreshCacheDir(dir string) {
	os.Remove(filepath.Join(dir, "index.db"))
	os.Remove(filepath.Join(dir, "data")) // fails, harmlessly, unless empty
	os.Remove(dir)
}
