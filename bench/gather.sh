#!/usr/bin/env bash
# Write-gathering benchmark in the shape of Table 1 of the write-gathering paper:
# a 64 MiB file written with FILE_SYNC WRITEs of 8 KiB and 64 KiB, N = 1, 4, 8, 16 in
# flight (bench/wgbench, snfs's Go client), snfs with --write-gather off vs adaptive,
# nfs-ganesha with SYNC=1 (every WRITE fsync'd) as the peer, and the disk's own limit
# (N pwrites + one fdatasync, on the same file system). Also one independent client:
# the Linux kernel client in the UML guest, mounted -o sync, 4 threads of O_SYNC writes.
# Writes bench/results/gather-<date>.md.   Run as root: bash bench/gather.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-$(pwd)/../shared}
export PATH="$PATH:/usr/local/go/bin"
TOTAL=${TOTAL:-$((64 << 20))}
W=/var/tmp/snfs-gbench
. bench/guestlib.sh
rm -rf "$W"; mkdir -p "$W"/{snfs,ganesha,disk,state,grun,bin}
chmod 1777 "$W/snfs" "$W/ganesha"
go build -o "$W/bin/snfs" ./cmd/snfs
go build -o "$W/bin/wgbench" ./bench/wgbench
PORT=23049 G_NFS=13049 G_MNT=13048 MPORT=39110
SNFS_PID=
cleanup() {
  [ -n "$SNFS_PID" ] && kill "$SNFS_PID" 2>/dev/null && wait "$SNFS_PID" 2>/dev/null || true
  RUN="$W/grun" "$SHARED/tools/ganesha-peer/stop.sh" >/dev/null 2>&1 || true
}
trap cleanup EXIT
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
declare -A R
start_snfs() {
  "$W/bin/snfs" serve --nfs-port $PORT --mount-port $PORT --state-dir "$W/state" --metrics 127.0.0.1:$MPORT \
    --write-gather "$1" --export-options rw,no_root_squash "$W/snfs" 2>>"$W/snfs.log" &
  SNFS_PID=$!; sleep 0.5
}
stop_snfs() { kill "$SNFS_PID"; wait "$SNFS_PID" || true; SNFS_PID=; }
guest_osync() { # port mountport export
  out=$(guest_run --host-root --opts sync --port "$1" --mountport "$2" --export "$3" "$(pwd)/bench/guest-osync.sh" 2>&1)
  echo "$out" | grep -q "script status: 0" || { echo "$out" >&2; exit 1; }
  echo "$out" | sed -n 's/^BENCH osync_mib_s //p'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
REPS=${REPS:-3}
# Modes are interleaved cell by cell (a fresh server each run), so that neither mode
# is favoured by the state the other left on the disk; medians of $REPS.
for size in 8192 65536; do for n in 1 4 8 16; do
  for mode in off adaptive; do
    mib=(); fl=(); cpu=(); ceil=(); win=()
    for i in $(seq $REPS); do
      start_snfs $mode
      line=$("$W/bin/wgbench" -addr 127.0.0.1:$PORT -export "$W/snfs" -size $size -n $n -total $TOTAL -metrics 127.0.0.1:$MPORT -pid $SNFS_PID)
      if [ $mode = adaptive ]; then
        # The same client, N and sizes with UNSTABLE writes (no flush at all): what
        # this client and server reach over loopback on this machine before any disk.
        ceil+=("$("$W/bin/wgbench" -unstable -addr 127.0.0.1:$PORT -export "$W/snfs" -size $size -n $n -total $TOTAL | field mib_s)")
        # Perfect gathering through the same client and server: windows of N
        # UNSTABLE writes, each followed by one COMMIT (one flush per N writes).
        win+=("$("$W/bin/wgbench" -window -addr 127.0.0.1:$PORT -export "$W/snfs" -size $size -n $n -total $TOTAL | field mib_s)")
      fi
      stop_snfs
      echo "$mode $line" >&2
      mib+=("$(echo "$line" | field mib_s)"); fl+=("$(echo "$line" | field flushes_per_mib)"); cpu+=("$(echo "$line" | field cpu_s_per_mib)")
    done
    R[$mode,$size,$n,mib]=$(printf '%s\n' "${mib[@]}" | median)
    R[$mode,$size,$n,fl]=$(printf '%s\n' "${fl[@]}" | median)
    R[$mode,$size,$n,cpu]=$(printf '%s\n' "${cpu[@]}" | median)
    if [ $mode = adaptive ]; then
      R[ceil,$size,$n,mib]=$(printf '%s\n' "${ceil[@]}" | median)
      R[win,$size,$n,mib]=$(printf '%s\n' "${win[@]}" | median)
    fi
  done
done; done
for mode in off adaptive; do
  start_snfs $mode
  R[$mode,osync]=$(guest_osync $PORT $PORT "$W/snfs")
  stop_snfs
done
SYNC=1 EXPORT="$W/ganesha" RUN="$W/grun" NFS_PORT=$G_NFS MNT_PORT=$G_MNT "$SHARED/tools/ganesha-peer/start.sh" >"$W/ganesha.start" 2>&1
GPID=$(cat "$W/grun/ganesha.pid"); sleep 1
for size in 8192 65536; do for n in 1 4 8 16; do
  mib=(); cpu=()
  for i in $(seq $REPS); do
    line=$("$W/bin/wgbench" -addr 127.0.0.1:$G_NFS -mount 127.0.0.1:$G_MNT -export "$W/ganesha" -size $size -n $n -total $TOTAL -pid $GPID)
    echo "ganesha $line" >&2
    mib+=("$(echo "$line" | field mib_s)"); cpu+=("$(echo "$line" | field cpu_s_per_mib)")
  done
  R[ganesha,$size,$n,mib]=$(printf '%s\n' "${mib[@]}" | median); R[ganesha,$size,$n,cpu]=$(printf '%s\n' "${cpu[@]}" | median)
done; done
R[ganesha,osync]=$(guest_osync $G_NFS $G_MNT "$W/ganesha")
for size in 8192 65536; do for n in 1 4 8 16; do
  mib=()
  for i in $(seq $REPS); do
    mib+=("$("$W/bin/wgbench" -disk "$W/disk" -size $size -n $n -total $TOTAL | field mib_s)")
  done
  R[disk,$size,$n,mib]=$(printf '%s\n' "${mib[@]}" | median)
done; done

div() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "-" }'; }
out="bench/results/gather-$(date -u +%Y%m%d-%H%M).md"
{
  echo "# Write gathering — Table 1 shape (64 MiB of FILE_SYNC writes)"
  echo
  echo "Medians of $REPS runs; off and adaptive interleaved, a fresh server for each run."
  echo "Command: \`bash bench/gather.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores, ext4 on /var/tmp. Client: bench/wgbench (snfs Go client, N writes in flight, one TCP connection)."
  echo "off = \`--write-gather off\` (one fsync per stable write, like knfsd); adaptive = the default. ganesha: \`SYNC=1\` (NFS_Commit=true: every WRITE fsync'd; its flushes are 1 per WRITE by configuration, not measured)."
  echo "disk = this file system's own limit for that batch: N pwrites then one fdatasync, timed by wgbench -disk. CPU = server process user+system seconds per MiB."
  echo "no-flush ceiling = the same client, N and size sending UNSTABLE writes to the same snfs (no flush at all): the most any stable-write scheme could reach with this client on this machine, where client and server share $(nproc) cores."
  echo "window = perfect gathering through the network: the same client sends windows of N UNSTABLE writes, each window followed by one COMMIT once all N are answered (wgbench -window): one flush per N writes with no wait, what the disk limit becomes once every write is an RPC on this machine."
  echo
  echo "| size | N | off MiB/s | adaptive MiB/s | adaptive/off | ganesha MiB/s | adaptive/ganesha | disk MiB/s | adaptive/disk | no-flush ceiling MiB/s | ceiling/disk | window MiB/s | window/disk | adaptive/window | off flushes/MiB | adaptive flushes/MiB | flush reduction | off CPU s/MiB | adaptive CPU s/MiB | ganesha CPU s/MiB |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for size in 8192 65536; do for n in 1 4 8 16; do
    echo "| $((size / 1024)) KiB | $n | ${R[off,$size,$n,mib]} | ${R[adaptive,$size,$n,mib]} | $(div ${R[adaptive,$size,$n,mib]} ${R[off,$size,$n,mib]}) | ${R[ganesha,$size,$n,mib]} | $(div ${R[adaptive,$size,$n,mib]} ${R[ganesha,$size,$n,mib]}) | ${R[disk,$size,$n,mib]} | $(div ${R[adaptive,$size,$n,mib]} ${R[disk,$size,$n,mib]}) | ${R[ceil,$size,$n,mib]} | $(div ${R[ceil,$size,$n,mib]} ${R[disk,$size,$n,mib]}) | ${R[win,$size,$n,mib]} | $(div ${R[win,$size,$n,mib]} ${R[disk,$size,$n,mib]}) | $(div ${R[adaptive,$size,$n,mib]} ${R[win,$size,$n,mib]}) | ${R[off,$size,$n,fl]} | ${R[adaptive,$size,$n,fl]} | $(div ${R[off,$size,$n,fl]} ${R[adaptive,$size,$n,fl]})x | ${R[off,$size,$n,cpu]} | ${R[adaptive,$size,$n,cpu]} | ${R[ganesha,$size,$n,cpu]} |"
  done; done
  echo
  echo "Independent client: Linux kernel NFSv3 client (UML guest), mounted \`-o sync\`, 4 threads of 8 KiB O_SYNC writes (dd oflag=sync), 16 MiB in all:"
  echo
  echo "| server | MiB/s |"
  echo "|---|---|"
  echo "| snfs, gathering off | ${R[off,osync]} |"
  echo "| snfs, adaptive | ${R[adaptive,osync]} |"
  echo "| ganesha SYNC=1 | ${R[ganesha,osync]} |"
} > "$out"
cat "$out"
