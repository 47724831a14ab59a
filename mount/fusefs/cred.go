package fusefs

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"snfs/mount/vfs"
)

// creds finds the identity of the process behind a request: uid and gid from
// the request, supplementary groups from /proc/PID/status (cached briefly,
// since a process's groups rarely change and a request is no time to read a
// file for each).
type creds struct {
	mu    sync.Mutex
	byPID map[uint32]groupsAt
}

type groupsAt struct {
	groups []uint32
	at     time.Time
}

const groupsTTL = 2 * time.Second

func (c *creds) of(ctx context.Context) vfs.Cred {
	caller, ok := fuse.FromContext(ctx)
	if !ok {
		return vfs.Cred{}
	}
	cr := vfs.Cred{UID: caller.Uid, GID: caller.Gid}
	if caller.Pid == 0 {
		return cr
	}
	now := time.Now()
	c.mu.Lock()
	g, ok := c.byPID[caller.Pid]
	c.mu.Unlock()
	if !ok || now.Sub(g.at) > groupsTTL {
		g = groupsAt{groups: readGroups(caller.Pid), at: now}
		c.mu.Lock()
		if c.byPID == nil || len(c.byPID) > 4096 {
			c.byPID = map[uint32]groupsAt{}
		}
		c.byPID[caller.Pid] = g
		c.mu.Unlock()
	}
	cr.Groups = g.groups
	return cr
}

func readGroups(pid uint32) []uint32 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("Groups:")); ok {
			var gs []uint32
			for f := range bytes.FieldsSeq(rest) {
				if g, err := strconv.ParseUint(string(f), 10, 32); err == nil && len(gs) < 16 {
					gs = append(gs, uint32(g))
				}
			}
			return gs
		}
	}
	return nil
}
