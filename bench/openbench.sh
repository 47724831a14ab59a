#!/usr/bin/env bash
# The consistency protocol's OPEN/CLOSE benchmark (issue 13): bench/openbench with
# 64 protocol clients and the server in one process on loopback, 3% of opens
# conflicting (a callback), GETATTR in alternating phases of the same run; plus
# the state table's memory per entry at 1,000,000 entries (state's
# BenchmarkEntryMemory). Writes bench/results/openbench-<date>.md.
#
#   bash bench/openbench.sh (as root)     # ARGS="-reps 7 -duration 5s" adds or overrides openbench flags
#   PROFILE=1 bash bench/openbench.sh     # also CPU-profiles one more OPEN and one GETATTR phase
#
# The export and the state directory are plain directories on /var/tmp (a disk
# file system here, not tmpfs). OPEN, CLOSE and GETATTR write nothing to the disk;
# the files are created (NFSv3 CREATE) before the measured phases. 64 clients x
# 16 files + 2560 hot files stay within the server's descriptor cache (4096), so
# neither GETATTR nor OPEN pays open_by_handle_at per call.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
W=/var/tmp/snfs-openbench
ARGS=${ARGS:-}
rm -rf "$W"; mkdir -p "$W/export" "$W/state"
[ "$(stat -f -c %T /var/tmp)" != tmpfs ] || { echo "/var/tmp is tmpfs: want a disk file system" >&2; exit 2; }
go build -o "$W/openbench" ./bench/openbench

mem=$(go test -run '^$' -bench EntryMemory -benchtime 1x ./state)
one=$(echo "$mem" | sed -n 's/^BenchmarkEntryMemory\/one-client.* \([0-9.]*\) bytes\/entry.*/\1/p')
three=$(echo "$mem" | sed -n 's/^BenchmarkEntryMemory\/three-clients.* \([0-9.]*\) bytes\/entry.*/\1/p')
[ -n "$one" ] || { echo "$mem" >&2; echo "no bytes/entry from BenchmarkEntryMemory" >&2; exit 1; }

prof=()
[ -n "${PROFILE:-}" ] && prof=(-cpuprofile "$W/cpu")
cmd="${ARGS:+ARGS=\"$ARGS\" }${PROFILE:+PROFILE=1 }bash bench/openbench.sh"
out="bench/results/openbench-$(date -u +%Y%m%d-%H%M).md"
# shellcheck disable=SC2086 # ARGS is a list of flags
"$W/openbench" -dir "$W/export" -state "$W/state" -clients 64 -files 16 -hot 2560 -conflict 0.03 \
  -duration 3s -reps 5 -null "${prof[@]}" -entry-bytes "$one" -entry-bytes3 "$three" \
  -command "$cmd" -out "$out" $ARGS
# The same with one client and no conflicts: the latencies without load.
rm -rf "$W/export" "$W/state"; mkdir -p "$W/export" "$W/state"
# shellcheck disable=SC2086
"$W/openbench" -dir "$W/export" -state "$W/state" -clients 1 -files 100 -conflict 0 -hot 0 \
  -duration 3s -reps 5 -null $ARGS -out "$W/one.md" >/dev/null
{
  echo
  echo "## One client, no conflicts (latency without load)"
  echo
  echo "Same harness, same run, afterwards: \`$(sed -n 's/^openbench: `\(.*\)`\.$/\1/p' "$W/one.md")\`."
  echo
  sed -n '/^| measure/,/^$/p' "$W/one.md" | grep -v 'with a callback\|callback round trip\|conflicting OPEN'
  sed -n '/^Per phase/,$p' "$W/one.md"
  echo
  echo "Memory per entry: \`go test -run '^\$' -bench EntryMemory -benchtime 1x ./state\` (live heap growth per entry, 24-byte handles), in the same run:"
  echo
  echo '```'
  echo "$mem" | grep '^Benchmark'
  echo '```'
} >> "$out"
if [ -n "${PROFILE:-}" ]; then
  for k in open getattr; do
    echo "== $k phase, top (cum) =="
    go tool pprof -top -cum -nodecount 60 "$W/openbench" "$W/cpu.$k" 2>/dev/null | head -70
  done
fi
echo "wrote $out"
