package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"snfs/mount"
)

const statusSynopsis = `snfs status [--json] MOUNTPOINT

Prints whether the snfs mount on MOUNTPOINT reaches its server (and since when),
the data written there and not yet on the server, the write-back permits it
holds, its modification log, and the conflicts it kept (Coda's cfs lsv and cfs
listcml), from the mount process's stats socket, without a call into the
mount. --json prints them as JSON. The same figures are gauges in the mount's
metrics (snfs stat MOUNTPOINT, --metrics).`

// status prints the status of the mount on its argument (mount.Status).
func status(args []string) error {
	fs := newFlagSet("status", statusSynopsis)
	asJSON := fs.Bool("json", false, "print the status as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errUsage
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	body, err := askMount(dir, "/status", "")
	if errors.Is(err, errNoPath) {
		return fmt.Errorf("the snfs mount on %s has no status: its mount process is older than snfs status MOUNTPOINT; remount it", dir)
	}
	if err != nil {
		return err
	}
	var st mount.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("the snfs mount on %s: its status: %w", dir, err)
	}
	if *asJSON {
		var b bytes.Buffer
		if err := json.Indent(&b, body, "", "  "); err != nil {
			return fmt.Errorf("the snfs mount on %s: its status: %w", dir, err)
		}
		_, err := os.Stdout.Write(b.Bytes())
		return err
	}
	return printStatus(os.Stdout, &st)
}

// printStatus prints st for a person: one line per figure, what does not
// apply to the mount's mode marked n/a. Ages are counted to st.Time (when
// the mount took it).
func printStatus(w io.Writer, st *mount.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(label, format string, a ...any) { fmt.Fprintf(tw, "%s:\t%s\n", label, fmt.Sprintf(format, a...)) }
	at := func(t time.Time) string {
		return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.DateTime), age(st.Time.Sub(t)))
	}
	line("mount", "%s (%s mode)", st.MountPoint, st.Mode)
	line("server", "%s, export %s", st.Server, st.Export)
	c := st.Connection
	if c.Connected {
		line("connection", "connected since %s", at(c.Since))
	} else {
		line("connection", "DISCONNECTED since %s: %s", at(c.Since), c.Reason)
	}
	if c.Offline {
		line("disconnected operation", "disconnected since %s: serving the cache, the rest fails (EHOSTDOWN) until the server answers", at(c.OfflineSince))
	}
	sn := st.SNFS
	na := "n/a (" + string(st.Mode) + " mode)"
	switch {
	case sn == nil:
		line("server restarts", "%s", na)
	case c.Recovering:
		line("server restarts", "%d seen; recovering from the last (reclaim, reintegration) now", c.ServerRestarts)
	default:
		line("server restarts", "%d seen", c.ServerRestarts)
	}
	d := st.Dirty
	switch {
	case d.Files == 0 && d.Bytes == 0:
		line("not yet on the server", "nothing")
	case d.OldestSeconds == nil:
		line("not yet on the server", "%s in %s (oldest: %s)", sizeOf(d.Bytes), plural(d.Files, "file"), na)
	case *d.OldestSeconds > 0:
		line("not yet on the server", "%s in %s, the oldest written %s ago", sizeOf(d.Bytes), plural(d.Files, "file"),
			age(time.Duration(*d.OldestSeconds*float64(time.Second))))
	default: // only data written through, not waiting for a delayed write-back
		line("not yet on the server", "%s in %s", sizeOf(d.Bytes), plural(d.Files, "file"))
	}
	if sn == nil {
		line("kept opens", "%s", na)
		line("write-back permits", "%s", na)
		line("modification log", "%s", na)
		line("conflicts", "%s", na)
		return tw.Flush()
	}
	line("kept opens", "%s (reopened with no call until the server recalls them)", plural(sn.KeptOpens, "file"))
	switch p := sn.Permits; {
	case !p.InUse:
		line("write-back permits", "none held (not in use: this mount makes its directory changes through the server)")
	case p.Held == 0:
		line("write-back permits", "none held")
	default:
		line("write-back permits", "%d held", p.Held)
		for _, h := range p.Dirs {
			fmt.Fprintf(tw, "\t%s (permit %d, since %s)\n", h.Dir, h.Permit, at(h.Since))
		}
	}
	switch l := sn.Log; {
	case !l.InUse:
		line("modification log", "empty (not in use: this mount logs no changes)")
	case l.Records == 0:
		line("modification log", "empty")
	default:
		planned := ""
		if l.Planned > 0 {
			planned = fmt.Sprintf(", %d being reintegrated", l.Planned)
		}
		line("modification log", "%s, %s, the oldest %s old%s", plural(l.Records, "record"), sizeOf(l.Bytes),
			age(time.Duration(l.OldestSeconds*float64(time.Second))), planned)
	}
	switch k := sn.Conflicts; {
	case k.Error != "":
		line("conflicts", "%d (reading the list: %s)", k.Count, k.Error)
	case k.Count == 0:
		line("conflicts", "none")
	default:
		more := ""
		if k.Count > len(k.Newest) {
			more = fmt.Sprintf("; the newest %d below, all with snfs conflicts %s", len(k.Newest), st.MountPoint)
		}
		line("conflicts", "%d%s", k.Count, more)
		for _, x := range k.Newest {
			fmt.Fprintf(tw, "\t%s  %s saved as %s (%s)\n", x.Time.Local().Format(time.DateTime), x.Name, x.Conflict, x.Reason)
		}
	}
	line("cache directory", "%s", sn.CacheDir)
	return tw.Flush()
}

// age prints d rounded for a person: to the second, or the millisecond below
// a second.
func age(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// sizeOf prints n bytes, with a binary unit above a KiB.
func sizeOf(n int64) string {
	if n < 1024 {
		return plural(int(n), "byte")
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v, u = v/1024, u+1
	}
	return fmt.Sprintf("%.1f %s (%d bytes)", v, units[u], n)
}

// plural prints n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, strings.TrimSuffix(thing, "s"))
}
