package main

import (
	"fmt"
	"strings"
)

// FUSE's and mount(8)'s common options (what /etc/fstab lines carry): each
// is applied, accepted because the mount already behaves so, or refused with
// the reason. mount(8) passes them on to its helper (mount.snfs), so they
// reach applyOpts as -o options.

// genericOptReasons are the options refused, with why.
var genericOptReasons = map[string]string{
	"allow_root": "an snfs mount is always allow_other: every user of this machine can use it, and the server decides what each may do (AUTH_SYS)",
	"uid":        "files keep the owner the server reports (every call carries the caller's own uid and gid); snfs does not map owners (squash them on the server: all_squash,anonuid=N in the exports)",
	"gid":        "files keep the group the server reports (every call carries the caller's own uid and gid); snfs does not map groups (squash them on the server: all_squash,anongid=N in the exports)",
	"umask":      "files keep the mode bits the server reports",
	"sync":       "not supported: data reaches the server at close and fsync (nfs mode) or after writeback-delay, at fsync and at unmount (snfs mode)",
	"dirsync":    "not supported: directory changes are the server's, made before the call returns",
	"mand":       "mandatory locks are not supported",
}

// applyGenericOpt applies mount(8)'s or FUSE's option k (hasValue: k=VALUE);
// known says whether k is one of them.
func (f *mountFlags) applyGenericOpt(k string, hasValue bool) (known bool, err error) {
	if why, ok := genericOptReasons[k]; ok {
		return true, fmt.Errorf("%s", why)
	}
	if strings.HasPrefix(k, "x-") || k == "comment" {
		// Userspace options (x-systemd.automount, x-mount.mkdir, ...),
		// for mount(8) and systemd: not the file system's.
		return true, nil
	}
	switch k {
	case "ro":
		f.readOnly = true
	case "rw":
		f.readOnly = false
	case "noexec":
		f.noExec = true
	case "exec":
		f.noExec = false
	case "user", "users", "owner", "group", "nouser", "defaults", "auto", "noauto", "_netdev", "nofail",
		"async", "silent", "loud":
		// mount(8)'s: who may mount, when, in what order; nothing for
		// the mount itself (user mounts get nosuid,nodev, which it always
		// is, and noexec, which mount(8) passes on as an option).
	case "nosuid", "nodev", "allow_other", "default_permissions":
		// Always so (mount/fusefs).
	case "suid", "dev":
		// The mount stays nosuid,nodev: set-ID bits of programs on the
		// server give no privilege here, device files open no device.
		// Not refused: fuse3's mount.fuse3 adds "dev,suid" to every
		// mount it hands on (unless nodev, nosuid were given).
	case "atime", "noatime", "relatime", "norelatime", "strictatime", "nostrictatime",
		"diratime", "nodiratime", "lazytime", "nolazytime":
		// Access times are the server's, which sets them as it serves
		// READs; this machine keeps none of its own.
	default:
		return false, nil
	}
	if hasValue && k != "user" {
		return true, fmt.Errorf("takes no value")
	}
	return true, nil
}
