package store

import (
	"errors"
	"os"
	"runtime"

	"snfs/rawsys"
)

// Cred is the identity an operation runs with, after export squashing.
type Cred struct {
	UID    uint32
	GID    uint32
	Groups []uint32
}

// canSwitch reports whether this process may change its fs identity (it is root).
var canSwitch = os.Geteuid() == 0

// As runs fn with the calling OS thread's fsuid, fsgid and supplementary groups set
// to c. When the process is not root, fn runs with the process's own identity.
func As(c Cred, fn func() error) error {
	// Root (fsuid 0, fsgid 0) is what every thread already is: its supplementary
	// groups cannot change a permission decision, so there is nothing to switch.
	if !canSwitch || (c.UID == 0 && c.GID == 0) {
		return fn()
	}
	runtime.LockOSThread()
	if err := setThreadCred(c); err != nil {
		restoreOrDie()
		runtime.UnlockOSThread()
		return err
	}
	err := fn()
	restoreOrDie()
	runtime.UnlockOSThread()
	return err
}

// restoreOrDie puts the thread back to root. If it cannot, the goroutine exits
// while still locked, which makes the runtime terminate the thread rather than reuse
// it with the wrong identity.
func restoreOrDie() {
	if err := setThreadCred(Cred{}); err != nil {
		runtime.Goexit()
	}
}

// errCredSwitch reports a failed identity switch.
var errCredSwitch = errors.New("store: cannot switch thread credentials")

func setThreadCred(c Cred) error {
	// setgroups(2) through the raw syscall changes only this thread; the libc and
	// syscall.Setgroups wrappers would broadcast to every thread.
	if err := rawsys.Setgroups(c.Groups); err != nil {
		return errCredSwitch
	}
	rawsys.Setfsgid(c.GID)
	rawsys.Setfsuid(c.UID)
	// setfs[ug]id report the previous value, never an error: read back to verify.
	if rawsys.Setfsuid(^uint32(0)) != c.UID || rawsys.Setfsgid(^uint32(0)) != c.GID {
		return errCredSwitch
	}
	return nil
}
