#!/usr/bin/env bash
# Opens kept until recalled (issue 26 item 2): snfs mode's reopens with the
# server behind a one-way delay ($DELAY, bench/delayproxy), `--close-delay 2s`
# (the old default) against `--close-delay forever` (the new one), in one run.
# A mount copies the Lua 5.4.8 tree, then reads every file $PASSES times, with a
# pause of $PAUSE between passes (longer than 2 s: a build reading its headers
# again later); each pass is timed and the server's OPEN, CLOSE and total calls
# are counted (snfs_server_rpc_total on --metrics). The two settings alternate
# within each of $ROUNDS rounds (the order flips each round); every figure is a
# median over the rounds. The export and the cache directories are plain
# directories on /var/tmp (a disk file system). Writes $OUT.
#
#   bash bench/keptbench.sh (as root)   # DELAY=1ms ROUNDS=3 PASSES=3 PAUSE=3
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED=${SHARED:-$ROOT/../shared}
[ -d "$SHARED" ] || SHARED=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir)/../../shared
export PATH="$PATH:/usr/local/go/bin"
DELAY=${DELAY:-1ms} ROUNDS=${ROUNDS:-3} PASSES=${PASSES:-3} PAUSE=${PAUSE:-3}
PORT=${PORT:-23261} MPORT=${MPORT:-23262} PXPORT=${PXPORT:-23263}
W=/var/tmp/snfs-keptbench-$$
OUT=${OUT:-bench/results/keptbench-$(date -u +%Y%m%d-%H%M).md}
[ "$(stat -f -c %T /var/tmp)" != tmpfs ] || { echo "/var/tmp is tmpfs: want a disk file system" >&2; exit 2; }
mkdir -p "$W/bin" "$W/export" "$W/state" "$W/src" "$W/mnt"
SRV= PX= MNT=
cleanup() {
  [ -z "$MNT" ] || "$W/bin/snfs" umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
  [ -z "$PX" ] || { kill "$PX" 2>/dev/null; wait "$PX" 2>/dev/null || true; }
  [ -z "$SRV" ] || { kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null || true; }
  rm -rf "$W"
}
trap cleanup EXIT
go build -o "$W/bin/snfs" ./cmd/snfs
go build -o "$W/bin/delayproxy" ./bench/delayproxy
tar xzf "$SHARED/data/lua-5.4.8.tar.gz" -C "$W/src"
SRC="$W/src/lua-5.4.8"
"$W/bin/snfs" serve --bind 127.0.0.1 --nfs-port "$PORT" --mount-port "$PORT" --state-dir "$W/state" \
  --metrics "127.0.0.1:$MPORT" --export-options rw,no_root_squash "$W/export" 2>"$W/serve.log" &
SRV=$!
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$MPORT/metrics" >/dev/null && break; sleep 0.1; done
"$W/bin/delayproxy" -listen "127.0.0.1:$PXPORT" -target "127.0.0.1:$PORT" -delay "$DELAY" 2>"$W/proxy.log" &
PX=$!
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PXPORT") 2>/dev/null && break; sleep 0.1; done

calls() { # [proc]: the server's calls of proc (all procedures if none)
  curl -sf "http://127.0.0.1:$MPORT/metrics" | awk -v p="${1:-}" '/^snfs_server_rpc_total\{/ {
    if (p == "" || index($0, "proc=\"" p "\"")) s += $NF } END { printf "%d\n", s }'
}
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
declare -A T O C A

run() { # setting round
  local cd=$1 r=$2 d p t0 o0 c0 a0
  d="$W/mnt/m"; mkdir -p "$d"
  "$W/bin/snfs" mount --nfs-port "$PXPORT" --mount-port "$PXPORT" --mode snfs --cache-dir "$W/cache-$cd-$r" \
    --close-delay "$cd" "127.0.0.1:$W/export" "$d" >>"$W/mount.log" 2>&1
  MNT=$d
  cp -r "$SRC" "$d/t-$cd-$r"
  for p in $(seq "$PASSES"); do
    sleep "$PAUSE"
    t0=$(now) o0=$(calls OPEN) c0=$(calls CLOSE) a0=$(calls)
    find "$d/t-$cd-$r" -type f -exec cat {} + >/dev/null
    T[$cd]="${T[$cd]:-} $(echo "$(now) - $t0" | bc)"
    O[$cd]="${O[$cd]:-} $(($(calls OPEN) - o0))"
    C[$cd]="${C[$cd]:-} $(($(calls CLOSE) - c0))"
    A[$cd]="${A[$cd]:-} $(($(calls) - a0))"
  done
  "$W/bin/snfs" umount "$d"
  MNT=
}

START_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="2s forever"; else order="forever 2s"; fi
  for cd in $order; do run "$cd" "$r"; done
done
med() { echo "$1" | tr ' ' '\n' | grep . | median; }
{
  echo "# keptbench $(date -u +%Y-%m-%dT%H:%MZ): reopens of the Lua 5.4.8 tree, one-way delay $DELAY"
  echo
  echo "$(nproc) CPUs, load $START_LOAD at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; $ROUNDS rounds x $PASSES passes (pause ${PAUSE}s), medians over the passes."
  echo
  echo "| --close-delay | read pass (s) | OPEN | CLOSE | all calls |"
  echo "|---|---|---|---|---|"
  for cd in 2s forever; do
    echo "| $cd | $(med "${T[$cd]}") | $(med "${O[$cd]}") | $(med "${C[$cd]}") | $(med "${A[$cd]}") |"
  done
} | tee "$OUT"
