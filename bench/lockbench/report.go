package main

import (
	"fmt"

	"sort"
	"strings"
	"time"
)

func us(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }

func callsString(m map[string]float64) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// report is the Markdown results: per delay, the medians of the phases, the
// median of the repetitions' ratios, and the calls per operation.
func report(cfg config, res []delayResult, command, note string) string {
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	w("# Locks through an snfs mount: lock+unlock and blocked grants against GETATTR\n\n")
	if command != "" {
		w("`%s`, %s.", command, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	} else {
		w("bench/lockbench, %s.", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	}
	if note != "" {
		w(" %s", note)
	}
	w("\n\nServer and two snfs-mode FUSE mounts (A, B) in one process, each mount's connection through a TCP proxy\n"+
		"delaying every chunk by the given time each way. One file open read-write through both mounts (write-shared:\n"+
		"not cached), %s. %d repetitions per delay, the getattr and lock phases alternating in order; medians of each phase,\n"+
		"then the median over repetitions of each repetition's ratio.\n\n", opened(cfg), cfg.reps)
	if cfg.deleg {
		w("-delegation: the server delegates locks (`--lock-delegation`, docs/protocol.md \"Lock delegation\"); the lock+unlock\n" +
			"phase locks a second file that only A has open (read-write), so its locks are delegated to A after the first LOCK;\n" +
			"the GETATTR and blocked-lock phases keep the shared file (its fstat is a GETATTR: not cached).\n\n")
	}
	w("## Uncontended lock+unlock against one GETATTR\n\n")
	w("GETATTR: `fstat` through A (the kernel asks the mount, the mount asks the server). lock+unlock: `fcntl(F_SETLK, F_WRLCK)`\n" +
		"then `fcntl(F_SETLK, F_UNLCK)` of one byte through A.\n\n")
	w("| one-way delay | ops/phase | GETATTR (µs) | lock+unlock (µs) | lock+unlock / GETATTR | lock+unlock / (2 x GETATTR) |\n|---|---|---|---|---|---|\n")
	for _, r := range res {
		var g, l, ratio, ratio2 []float64
		for _, x := range r.reps {
			gm, lm := float64(x.getattr.median()), float64(x.lock.median())
			g, l = append(g, gm), append(l, lm)
			ratio, ratio2 = append(ratio, lm/gm), append(ratio2, lm/(2*gm))
		}
		w("| %v | %d | %.0f | %.0f | %.2f | %.2f |\n", r.delay, r.ops, medianOf(g)/1e3, medianOf(l)/1e3, medianOf(ratio), medianOf(ratio2))
	}
	w("\nCalls each mount sent, and callbacks (CB_CALLBACK) each served, per operation (last repetition):\n\n")
	w("| one-way delay | fstat | lock+unlock | blocked lock (trial: A locks, B waits, A unlocks, B unlocks) |\n|---|---|---|---|\n")
	for _, r := range res {
		x := r.reps[len(r.reps)-1]
		w("| %v | %s | %s | %s |\n", r.delay, callsString(x.getattr.calls), callsString(x.lock.calls), callsString(x.grant.calls))
	}
	w("\n## A blocked F_SETLKW granted after the holder's unlock\n\n")
	w("B's `fcntl(F_SETLKW)` waits on the server (its LOCK answered LOCK_BLOCKED); A unlocks. Time from A's `F_UNLCK`\n" +
		"returning to B's `F_SETLKW` returning, all trials of all repetitions; \"from the unlock call\" counts from A's call instead.\n" +
		"A negative time: B's F_SETLKW returned before A's F_UNLCK did (the server sends B's CB_GRANTED before it answers A's LOCKU).\n" +
		"GETATTR: the median fstat of the same repetitions. The bound from the unlock call is one round trip (A's LOCKU one way,\n" +
		"the server's CB_GRANTED to B the other), so the last column, median from the unlock call / GETATTR, is 1 at best.\n\n")
	w("| one-way delay | trials | median (µs) | p90 (µs) | max (µs) | median from the unlock call (µs) | GETATTR (µs) | from the unlock call / GETATTR |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range res {
		var all, fromCall []time.Duration
		var g, ratio []float64
		for _, x := range r.reps {
			all = append(all, x.grant.lat...)
			fromCall = append(fromCall, x.grantFromCall...)
			gm := float64(x.getattr.median())
			g = append(g, gm)
			ratio = append(ratio, float64(quantile(x.grantFromCall, 0.5))/gm)
		}
		w("| %v | %d | %s | %s | %s | %s | %.0f | %.2f |\n", r.delay, len(all), us(quantile(all, 0.5)), us(quantile(all, 0.9)),
			us(quantile(all, 1)), us(quantile(fromCall, 0.5)), medianOf(g)/1e3, medianOf(ratio))
	}
	w("\nPer repetition (medians, µs): getattr / lock+unlock / grant after unlock\n\n")
	for _, r := range res {
		var parts []string
		for _, x := range r.reps {
			parts = append(parts, fmt.Sprintf("%s/%s/%s", us(x.getattr.median()), us(x.lock.median()), us(x.grant.median())))
		}
		w("- %v: %s\n", r.delay, strings.Join(parts, ", "))
	}
	return b.String()
}

func opened(cfg config) string {
	if cfg.bFirst {
		return "opened by B first (-b-first: A's open goes through the mount)"
	}
	return "opened by A first (A's open is a passthrough write open, pinned when B opens)"
}
