#!/usr/bin/env bash
# Crash recovery of the consistency protocol (issue 15): bench/recoverbench.
# 1. Recovery time: `snfs serve` as a real process, state directory on disk,
#    C client sessions holding F files open in total, SIGKILL, restart with the
#    same state directory, time from the new process's start to the end of its
#    grace period (reason must be all_reclaimed, F items reclaimed).
# 2. OPEN rate with durable client records on and off (server.Config.VolatileClients),
#    two in-process servers, alternating phases in the same run; medians.
# Writes bench/results/recoverbench-<date>.md.
#
#   bash bench/recoverbench.sh (as root)    # ARGS="-reps 5" adds or overrides recoverbench flags
#   NOTE="the machine was busy: ..." bash bench/recoverbench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
W=/var/tmp/snfs-recoverbench
ARGS=${ARGS:-}
rm -rf "$W"; mkdir -p "$W"
[ "$(stat -f -c %T /var/tmp)" != tmpfs ] || { echo "/var/tmp is tmpfs: want a disk file system" >&2; exit 2; }
go build -o "$W/snfs" ./cmd/snfs
go build -o "$W/recoverbench" ./bench/recoverbench
cmd="${ARGS:+ARGS=\"$ARGS\" }bash bench/recoverbench.sh"
out="bench/results/recoverbench-$(date -u +%Y%m%d-%H%M).md"
note="Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg). ${NOTE:-}"
# shellcheck disable=SC2086 # ARGS is a list of flags
"$W/recoverbench" -snfs "$W/snfs" -work "$W/work" -clients 1,4,16,64 -files 1000,16000,64000 -reps 3 \
  -open-clients 64 -open-files 16 -open-duration 3s -open-reps 5 \
  -command "$cmd" -note "$note" -out "$out" $ARGS
rm -rf "$W"
echo "wrote $out"
