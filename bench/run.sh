#!/usr/bin/env bash
# Side-by-side benchmark: snfs vs nfs-ganesha (../shared/tools/ganesha-peer) in the
# same run, with the same clients: libnfs (nfs-cp, nfs-cat, nfs-ls),
# ../shared/tools/nfsmeta, and the Linux kernel client in the UML guest
# (../shared/tools/linux-nfs-client). Each figure is the median of $REPS runs.
# Writes a Markdown table to bench/results/foundation-<date>.md.
#
#   bash bench/run.sh (as root)   # REPS=5 INNER=3 by default; SNFS_OPTS=rw,no_root_squash,async for an async export
#
# Each export (and the local-disk reference) is its own file system, FS=ext4 by
# default: an image file under /var/tmp (so on the disk), made by mkfs.ext4 with
# its defaults (journaled) and loop-mounted with direct I/O, so every flush
# reaches the disk. Separate file systems keep one server's work from changing
# the other's: on ext4 without a journal (what /var/tmp itself is here), a new
# inode skips every inode freed in the last minutes, so creates right after
# another server's rm -rf ran several times slower. FS=ext4-nojournal makes the
# images like /var/tmp; FS=dir uses plain directories on /var/tmp (the old setup).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED=${SHARED:-$ROOT/../shared}
export PATH="$PATH:/usr/local/go/bin"
REPS=${REPS:-5}
W=/var/tmp/snfs-bench
. bench/guestlib.sh
SNFS_PORT=22049 G_NFS=12049 G_MNT=12048
FS=${FS:-ext4}
unmount_all() {
  for d in snfs ganesha local; do
    if mountpoint -q "$W/$d"; then umount "$W/$d"; fi
    [ -f "$W/$d.img" ] && losetup -j "$W/$d.img" | cut -d: -f1 | xargs -r -n1 losetup -d
  done
  return 0
}
[ -d "$W" ] && unmount_all
rm -rf "$W"; mkdir -p "$W"/{snfs,ganesha,local,state,grun,bin}
for d in snfs ganesha local; do
  case $FS in
    dir) continue ;;
    ext4) mk=(mkfs.ext4 -q -F) ;;
    ext4-nojournal) mk=(mkfs.ext4 -q -F -O ^has_journal) ;;
    *) echo "FS=$FS: want ext4, ext4-nojournal or dir" >&2; exit 2 ;;
  esac
  truncate -s 4G "$W/$d.img" && "${mk[@]}" "$W/$d.img"
  mount "$(losetup --direct-io=on -f --show "$W/$d.img")" "$W/$d"
done
command -v nfs-cp >/dev/null || { apt-get update -qq && apt-get install -y -qq libnfs-utils libnfs-dev >/dev/null; }
go build -o "$W/bin/snfs" ./cmd/snfs
gcc -O2 -Wall -o "$W/bin/nfsmeta" "$SHARED/tools/nfsmeta/nfsmeta.c" -lnfs

# Fixtures made before the servers start (ganesha wants changes only through NFS).
head -c $((256 << 20)) /dev/urandom > "$W/src256"
for d in snfs ganesha local; do
  mkdir -p "$W/$d/list10k" && (cd "$W/$d/list10k" && seq -f 'f%05g' 0 9999 | xargs touch)
done
mkdir -p "$W/treesrc/tree"
for i in $(seq 1 300); do
  d="$W/treesrc/tree/d$((i % 30))/s$i"; mkdir -p "$d"
  for j in 1 2 3 4 5; do head -c $(( (i * 37 + j * 101) % 8192 + 1 )) /dev/zero > "$d/f$j"; done
done
tar cf "$W/tree.tar" -C "$W/treesrc" tree
chmod -R a+rX "$W"; chmod 1777 "$W/snfs" "$W/ganesha" "$W/local"
sed "s#@TREE_TAR@#$W/tree.tar#" bench/guest-tree.sh > "$W/guest-tree.sh"

SNFS_PID=
cleanup() {
  [ -n "$SNFS_PID" ] && kill "$SNFS_PID" 2>/dev/null && wait "$SNFS_PID" 2>/dev/null
  RUN="$W/grun" "$SHARED/tools/ganesha-peer/stop.sh" >/dev/null 2>&1 || true
  unmount_all
  rm -f "$W"/*.img # 4 GiB each, sparse: the results are in bench/results
}
trap cleanup EXIT
"$W/bin/snfs" serve --nfs-port $SNFS_PORT --mount-port $SNFS_PORT --state-dir "$W/state" \
  --export-options "${SNFS_OPTS:-rw,no_root_squash}" "$W/snfs" 2>"$W/snfs.log" &
SNFS_PID=$!
EXPORT="$W/ganesha" RUN="$W/grun" NFS_PORT=$G_NFS MNT_PORT=$G_MNT "$SHARED/tools/ganesha-peer/start.sh" >"$W/ganesha.start" 2>&1
sleep 1

url() { # server path
  case $1 in
    snfs) echo "nfs://127.0.0.1$W/snfs$2?version=3&nfsport=$SNFS_PORT&mountport=$SNFS_PORT" ;;
    ganesha) echo "nfs://127.0.0.1$W/ganesha$2?version=3&nfsport=$G_NFS&mountport=$G_MNT" ;;
  esac
}
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
secs() { local a=$(now); "$@" >/dev/null 2>&1; echo "$(now) - $a" | bc; }

declare -A R
# Servers alternate within every repetition, so that drift on a shared machine
# does not favour either; each figure is the median of $REPS.
declare -A S
add() { S[$1]="${S[$1]:-} $2"; }
med() { printf '%s\n' ${S[$1]} | median; }
# The short rows (read, ls: ~0.1 s) run INNER times per repetition, the servers
# alternating each time, so their medians rest on REPS*INNER runs.
INNER=${INNER:-3}
for i in $(seq $REPS); do
  # Which server goes first alternates from one repetition to the next.
  order="snfs ganesha"; [ $((i % 2)) = 0 ] && order="ganesha snfs"
  for srv in $order; do
    "$W/bin/nfsmeta" rm 1 "$(url $srv /big)" >/dev/null 2>&1 || true
    add $srv,w "$(secs nfs-cp "$W/src256" "$(url $srv /big)")"
  done
  for j in $(seq $INNER); do
    for srv in $order; do
      add $srv,r "$(secs sh -c "nfs-cat '$(url $srv /big)' > /dev/null")"
      add $srv,l "$(secs nfs-ls "$(url $srv /list10k)")"
    done
  done
  for srv in $order; do
    add $srv,f "$("$W/bin/nfsmeta" files 1000 "$(url $srv '')" | sed -n 's/.*iter_per_s=\([0-9.]*\).*/\1/p')"
    add $srv,d "$("$W/bin/nfsmeta" dirs 1000 "$(url $srv '')" | sed -n 's/.*iter_per_s=\([0-9.]*\).*/\1/p')"
    port=$SNFS_PORT mport=$SNFS_PORT; [ $srv = ganesha ] && port=$G_NFS mport=$G_MNT
    out=$(guest_run --host-root --port $port --mountport $mport --export "$W/$srv" "$W/guest-tree.sh" 2>&1)
    echo "$out" | grep -q "script status: 0" || { echo "$out" >&2; exit 1; }
    add $srv,u "$(echo "$out" | sed -n 's/^BENCH untar //p')"
    add $srv,s "$(echo "$out" | sed -n 's/^BENCH lslR //p')"
    add $srv,m "$(echo "$out" | sed -n 's/^BENCH rm //p')"
  done
done
for srv in snfs ganesha; do
  cmp <(nfs-cat "$(url $srv /big)") "$W/src256" || { echo "$srv: 256 MiB file differs" >&2; exit 1; }
  R[$srv,write]=$(med $srv,w | awk '{printf "%.1f", 256/$1}')
  R[$srv,read]=$(med $srv,r | awk '{printf "%.1f", 256/$1}')
  R[$srv,files]=$(med $srv,f); R[$srv,dirs]=$(med $srv,d)
  R[$srv,ls]=$(med $srv,l | awk '{printf "%.3f", $1}')
  R[$srv,untar]=$(med $srv,u | awk '{printf "%.2f", $1}')
  R[$srv,lslr]=$(med $srv,s | awk '{printf "%.2f", $1}')
  R[$srv,rm]=$(med $srv,m | awk '{printf "%.2f", $1}')
done

# Local disk, for reference.
lw=(); lf=(); ld=(); lr=()
for i in $(seq $REPS); do
  lw+=("$(secs dd if="$W/src256" of="$W/local/big" bs=1M conv=fsync)")
  lr+=("$(secs sh -c "cat '$W/local/big' > /dev/null")")
  lf+=("$("$W/bin/nfsmeta" files 1000 "$W/local" | sed -n 's/.*iter_per_s=\([0-9.]*\).*/\1/p')")
  ld+=("$("$W/bin/nfsmeta" dirs 1000 "$W/local" | sed -n 's/.*iter_per_s=\([0-9.]*\).*/\1/p')")
done
R[local,write]=$(printf '%s\n' "${lw[@]}" | median | awk '{printf "%.1f", 256/$1}')
R[local,read]=$(printf '%s\n' "${lr[@]}" | median | awk '{printf "%.1f", 256/$1}')
R[local,files]=$(printf '%s\n' "${lf[@]}" | median); R[local,dirs]=$(printf '%s\n' "${ld[@]}" | median)

fsdesc() {
  case $FS in
    dir) echo "exports in directories on /var/tmp ($(df -T /var/tmp | awk 'NR==2{print $2}'))" ;;
    *) echo "each export its own FS=$FS file system (a 4 GiB image on /var/tmp, loop-mounted with direct I/O)" ;;
  esac
}
ratio_hi() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }   # higher is better
ratio_lo() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b/a}'; }   # time: lower is better
out="bench/results/foundation-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# snfs vs nfs-ganesha — foundation benchmark"
  echo
  echo "Command: \`REPS=$REPS INNER=$INNER ${SNFS_OPTS:+SNFS_OPTS=$SNFS_OPTS }bash bench/run.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores, $(fsdesc)."
  echo "snfs export options: \`${SNFS_OPTS:-rw,no_root_squash}\` (sync metadata unless \`async\`); ganesha: shared/tools/ganesha-peer defaults."
  echo "Medians of $REPS runs ($((REPS * INNER)) for read and nfs-ls), snfs and ganesha alternating within each run (the first alternating too). Ratio = snfs/ganesha for rates, ganesha/snfs for times: > 1 means snfs is faster."
  echo
  echo "| benchmark | snfs | ganesha | ratio | local disk |"
  echo "|---|---|---|---|---|"
  echo "| 256 MiB write, nfs-cp (UNSTABLE+COMMIT), MiB/s | ${R[snfs,write]} | ${R[ganesha,write]} | $(ratio_hi ${R[snfs,write]} ${R[ganesha,write]}) | ${R[local,write]} (dd conv=fsync) |"
  echo "| 256 MiB read, nfs-cat, MiB/s | ${R[snfs,read]} | ${R[ganesha,read]} | $(ratio_hi ${R[snfs,read]} ${R[ganesha,read]}) | ${R[local,read]} (cat, cached) |"
  echo "| nfsmeta files 1000 (create+close+unlink), iterations/s | ${R[snfs,files]} | ${R[ganesha,files]} | $(ratio_hi ${R[snfs,files]} ${R[ganesha,files]}) | ${R[local,files]} |"
  echo "| nfsmeta dirs 1000 (mkdir+rmdir), iterations/s | ${R[snfs,dirs]} | ${R[ganesha,dirs]} | $(ratio_hi ${R[snfs,dirs]} ${R[ganesha,dirs]}) | ${R[local,dirs]} |"
  echo "| nfs-ls 10,000 entries (READDIRPLUS), s | ${R[snfs,ls]} | ${R[ganesha,ls]} | $(ratio_lo ${R[snfs,ls]} ${R[ganesha,ls]}) | |"
  echo "| Linux client: untar 1,500 files / 330 dirs, s | ${R[snfs,untar]} | ${R[ganesha,untar]} | $(ratio_lo ${R[snfs,untar]} ${R[ganesha,untar]}) | |"
  echo "| Linux client: ls -lR of the tree, s | ${R[snfs,lslr]} | ${R[ganesha,lslr]} | $(ratio_lo ${R[snfs,lslr]} ${R[ganesha,lslr]}) | |"
  echo "| Linux client: rm -rf of the tree, s | ${R[snfs,rm]} | ${R[ganesha,rm]} | $(ratio_lo ${R[snfs,rm]} ${R[ganesha,rm]}) | |"
  echo
  echo "Every run, in order (seconds for write/read/ls/untar/lslR/rm, iterations/s for files/dirs):"
  echo
  echo '```'
  for k in w:write r:read f:files d:dirs l:ls u:untar s:lslR m:rm; do
    for srv in snfs ganesha; do
      printf '%-6s %-8s %s\n' "${k#*:}" "$srv" "$(echo ${S[$srv,${k%%:*}]})"
    done
  done
  echo '```'
} > "$out"
cat "$out"
