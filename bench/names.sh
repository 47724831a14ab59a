#!/usr/bin/env bash
# The name cache's measurement (issue 26 item 1): snfs mode before and after
# (BEFORE, a commit of this repository, built from `git archive`; after: this
# tree), and nfs mode for reference, with the server behind bench/delayproxy
# ($DELAY_NET one way). On the Lua 5.4.8 tree: MakeDir and Copy as in
# bench/coda.sh's Andrew, ScanDir = `ls -lR` (Andrew's), ScanDir2 = the same
# `ls -lR` again $PAUSE s later (past nfs mode's 3 s attribute timeout for
# files), ReadAll; then Tree and Tree2: `ls -lR` of a copy of the tree made on
# the server before the mount (no file of it opened by the mount), twice, the
# second $PAUSE s after the first. RPCs per procedure are the server's counters. One round per
# configuration (ROUNDS for more; medians). Writes $OUT.
#
#   BEFORE=9078537 bash bench/names.sh   (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED=${SHARED:-$ROOT/../shared}
[ -d "$SHARED" ] || SHARED=$(git -C "$ROOT" rev-parse --path-format=absolute --git-common-dir)/../../shared
export PATH="$PATH:/usr/local/go/bin"
BEFORE=${BEFORE:?the commit to compare with}
DELAY_NET=${DELAY_NET:-1ms}
ROUNDS=${ROUNDS:-1}
PAUSE=${PAUSE:-4}
DELAY=${DELAY:-30s} # snfs mode's --writeback-delay
W=/var/tmp/snfs-names-bench
IMG=${IMG:-2G}
PORT=${PORT:-23161} MPORT=${MPORT:-23162} PXPORT=${PXPORT:-23163}
OUT=${OUT:-bench/results/names-$(date -u +%Y%m%d-%H%M).md}
PHASES="MakeDir Copy ScanDir ScanDir2 ReadAll Tree Tree2"
. bench/mountlib.sh

cfg_port() { echo "$PXPORT"; }
cfg_bin() { case $1 in snfs-before*) echo "$W/bin/snfs-before" ;; *) echo "$W/bin/snfs" ;; esac; }
PXPID=
on_exit() { cleanup; [ -n "$PXPID" ] && kill "$PXPID" 2>/dev/null; return 0; }
trap on_exit EXIT

setup_images
B="$W/before-src"
mkdir -p "$B" && git -C "$ROOT" archive "$BEFORE" | tar -x -C "$B"
(cd "$B" && go build -o "$W/bin/snfs-before" ./cmd/snfs)
(cd "$ROOT" && go build -o "$W/bin/delayproxy" ./bench/delayproxy)
tar xzf "$SHARED/data/lua-5.4.8.tar.gz" -C "$W/src"
SRC="$W/src/lua-5.4.8"
cat $(find "$SRC" -type f) >/dev/null
start_server
"$W/bin/delayproxy" -listen "127.0.0.1:$PXPORT" -target "127.0.0.1:$PORT" -delay "$DELAY_NET" 2>>"$W/proxy.log" &
PXPID=$!
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PXPORT") 2>/dev/null && break; sleep 0.1; done

mkdirs() { (cd "$SRC" && find . -mindepth 1 -type d) | (cd "$1" && xargs mkdir); }
scan() { ls -lR "$1"; }
scan2() { sleep "$PAUSE"; ls -lR "$1"; }
readall() { find "$1" -type f -exec cat {} +; }

CFGS="nfs snfs-before snfs"
for i in $(seq "$ROUNDS"); do
  for cfg in $(rotate "$CFGS" $((i - 1))); do
    cp -r "$SRC" "$W/export/tree-$cfg-r$i"
    mount_cfg "$cfg" "$W/cache/$cfg-r$i"; d="$MNT/$cfg-r$i"; mkdir "$d"
    phase "$cfg" MakeDir mkdirs "$d"
    phase "$cfg" Copy cp -r "$SRC/." "$d/"
    phase "$cfg" ScanDir scan "$d"
    before=$(rpcs "$cfg"); sleep "$PAUSE"; after=$(rpcs "$cfg")
    idle=$(LC_ALL=C join <(echo "$before") <(echo "$after") | awk '$3 != $2 {printf "%s:%d ", $1, $3 - $2}')
    echo "$cfg round $i: calls while idle $PAUSE s: ${idle:-none}" >&2
    phase "$cfg" ScanDir2 scan "$d"
    phase "$cfg" ReadAll readall "$d"
    phase "$cfg" Tree scan "$MNT/tree-$cfg-r$i"
    phase "$cfg" Tree2 scan2 "$MNT/tree-$cfg-r$i"
    umount_cfg "$cfg"
  done
done

{
  echo "# The name cache: snfs mode before ($BEFORE) and after ($(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- . 2>/dev/null || echo ' with uncommitted changes')), nfs mode, at $DELAY_NET one-way delay"
  echo
  echo "Command: \`BEFORE=$BEFORE DELAY_NET=$DELAY_NET ROUNDS=$ROUNDS PAUSE=$PAUSE bash bench/names.sh\`, $(date -u '+%Y-%m-%d %H:%M') UTC, $(nproc) cores (shared with other work: load $(cut -d' ' -f1-3 /proc/loadavg))."
  echo "Lua 5.4.8 tree; MakeDir, Copy, ScanDir (\`ls -lR\`) as bench/coda.sh's Andrew; ScanDir2: \`ls -lR\` again after a ${PAUSE} s pause (past nfs mode's file attribute timeout); ReadAll; Tree, Tree2: \`ls -lR\` of a copy of the tree made on the server before the mount, twice (${PAUSE} s apart). Seconds and the server's calls (medians of $ROUNDS rounds)."
  echo
  echo "| phase | nfs s | nfs RPCs | snfs before s | snfs before RPCs | snfs after s | snfs after RPCs |"
  echo "|---|---|---|---|---|---|---|"
  for ph in $PHASES; do
    line="| $ph |"
    for cfg in $CFGS; do
      tot=0
      for proc in "${!PROCS[@]}"; do tot=$((tot + $(medc "$cfg" "$ph" "$proc"))); done
      line="$line $(printf %.2f "$(med "$cfg,$ph")") | $tot |"
    done
    echo "$line"
  done
  echo
  echo "| phase | procedure | nfs | snfs before | snfs after |"
  echo "|---|---|---|---|---|"
  for ph in $PHASES; do
    for proc in $(printf '%s\n' "${!PROCS[@]}" | sort); do
      line="| $ph | $proc |" any=
      for cfg in $CFGS; do v=$(medc "$cfg" "$ph" "$proc"); [ "$v" != 0 ] && any=1; line="$line $v |"; done
      [ -n "$any" ] && echo "$line"
    done
  done
} >"$OUT"
cat "$OUT"
