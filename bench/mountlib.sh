# Shared by bench/mountbench.sh and bench/mountbench2.sh (sourced, not run): the
# four configurations of the snfs mount benchmarks, each on its own ext4 image,
# the server, its RPC counters and the timing of phases.
#
# The caller sets, before sourcing: W (work directory under /var/tmp), PORT and
# MPORT (the server's NFS+MOUNT port and metrics port), ROOT (the repository),
# IMG (image size, e.g. 4G) and DELAY (snfs mode's --writeback-delay); for the
# configuration snfs-inf also DELAY_INF.
#
# Configurations:
#   local     a directory on its own ext4 image (the local disk)
#   local-durable  the same directory: the caller's phases make each written file
#             durable at its close (bench/coda.sh's durable copy and make)
#   fuse      bench/fuseloop: go-fuse's loopback of a directory on its own ext4 image
#             (with $FUSELOOP_OPTS: -cached makes it the floor of a caching FUSE file system)
#   fuse-dio  the same with -daemon-io: no passthrough, every read and write comes to the
#             daemon (the floor of a FUSE file system that must see the writes)
#   fuse-null bench/fuseloop -null: an in-memory tree (1 h timeouts) whose daemon
#             does nothing: the floor of the create and mkdir loops (no Andrew)
#   fuse-durable  bench/fuseloop -durable of a directory on /var/tmp (the file system of
#             snfs mode's cache directory, not an image): passthrough, and every close of
#             an open for writing fdatasyncs the file first (the floor of a FUSE file
#             system whose close(2) returns once the data is on the local disk, as snfs
#             mode's does)
#   nfs       snfs mount --mode=nfs  against snfs serve on 127.0.0.1 (export: its own ext4 image)
#   snfs      snfs mount --mode=snfs, --writeback-delay $DELAY, cache directory on /var/tmp
#   snfs-inf  the same with --writeback-delay $DELAY_INF (effectively infinite)
# A configuration named nfs* or snfs* (snfs-inf* for the infinite delay), e.g.
# nfs@1ms, is a mount of snfs serve too; the hooks cfg_bin, cfg_port and
# cfg_mport (redefine them after sourcing) give its binary, the port it mounts
# and the metrics port of the server it counts (default: $W/bin/snfs, $PORT, $MPORT).
#
# SNFS_BIN, when set, is the snfs binary used instead of one built from $ROOT.

unmount_all() {
  local m d
  for m in "$W"/mnt/*; do
    if mountpoint -q "$m" 2>/dev/null; then umount "$m" 2>/dev/null || umount -l "$m" || true; fi
  done
  for d in local fuse export; do
    if mountpoint -q "$W/$d" 2>/dev/null; then umount "$W/$d" || umount -l "$W/$d" || true; fi
    [ -f "$W/$d.img" ] && losetup -j "$W/$d.img" | cut -d: -f1 | xargs -r -n1 losetup -d
  done
  return 0
}

# setup_images: a fresh $W with the three ext4 images mounted and the binaries built.
setup_images() {
  [ -d "$W" ] && unmount_all
  rm -rf "$W"; mkdir -p "$W"/{local,fuse,durable,export,state,bin,src,cache,mnt/fuse,mnt/fuse-null,mnt/fuse-dio,mnt/fuse-durable,mnt/nfs,mnt/snfs,mnt/snfs-inf}
  local d
  for d in local fuse export; do
    truncate -s "$IMG" "$W/$d.img" && mkfs.ext4 -q -F "$W/$d.img"
    mount "$(losetup --direct-io=on -f --show "$W/$d.img")" "$W/$d"
  done
  if [ -n "${SNFS_BIN:-}" ]; then cp "$SNFS_BIN" "$W/bin/snfs"; else (cd "$ROOT" && go build -o "$W/bin/snfs" ./cmd/snfs); fi
  (cd "$ROOT" && go build -o "$W/bin/fuseloop" ./bench/fuseloop)
}

SNFS_PID= FUSE_PID= FUSE_DIO_PID= FUSE_DUR_PID=
cleanup() {
  local m
  for m in "$W"/mnt/*; do
    if mountpoint -q "$m" 2>/dev/null; then umount "$m" 2>/dev/null || umount -l "$m" || true; fi
  done
  [ -n "$FUSE_PID" ] && kill "$FUSE_PID" 2>/dev/null
  [ -n "$FUSE_DIO_PID" ] && kill "$FUSE_DIO_PID" 2>/dev/null
  [ -n "$FUSE_DUR_PID" ] && kill "$FUSE_DUR_PID" 2>/dev/null
  [ -n "$SNFS_PID" ] && kill "$SNFS_PID" 2>/dev/null && wait "$SNFS_PID" 2>/dev/null
  unmount_all
  rm -rf "$W"/*.img "$W/cache" # the images are sparse, the results are in bench/results
}

start_server() {
  "$W/bin/snfs" serve --bind 127.0.0.1 --nfs-port "$PORT" --mount-port "$PORT" --state-dir "$W/state" \
    --metrics "127.0.0.1:$MPORT" --export-options rw,no_root_squash "$W/export" 2>"$W/serve.log" &
  SNFS_PID=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$MPORT/metrics" >/dev/null && return 0; sleep 0.1; done
  echo "snfs serve did not start" >&2; cat "$W/serve.log" >&2; exit 1
}

# The hooks of the configurations nfs* and snfs* (see the header).
cfg_bin() { echo "$W/bin/snfs"; }
cfg_port() { echo "$PORT"; }
cfg_mport() { echo "$MPORT"; }

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
f2() { awk -v a="$1" 'BEGIN{printf "%.2f", a}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (b > 0) printf "%.2f", a/b; else print "-"}'; }
# drop_caches: the kernel's page, dentry and inode caches, the same for every configuration.
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# rpcs prints "program/proc count" for every procedure of the server.
rpcs() { # [cfg]
  curl -sf "http://127.0.0.1:$(cfg_mport "${1:-}")/metrics" | awk '/^snfs_server_rpc_total\{/ {
    p = $0; sub(/.*program="/, "", p); sub(/".*/, "", p)
    q = $0; sub(/.*proc="/, "", q); sub(/".*/, "", q)
    print p "/" q, $NF }' | LC_ALL=C sort
}

declare -A T     # T[cfg,phase] = " t1 t2 ...", seconds, one per repetition
declare -A C     # C[cfg,phase,proc] = " n1 n2 ...", the server's calls of proc during the phase
declare -A PROCS # every procedure called at least once
# phase cfg phase command...: times the command; for the mounts of snfs serve it
# also diffs the server's RPC counts.
phase() {
  local cfg=$1 ph=$2; shift 2
  local before="" after a b
  case $cfg in nfs*|snfs*) before=$(rpcs "$cfg") ;; esac
  a=$(now)
  "$@" >/dev/null 2>>"$W/phases.log" || { echo "$cfg $ph failed: $*" >&2; tail -20 "$W/phases.log" >&2; exit 1; }
  b=$(now)
  T[$cfg,$ph]="${T[$cfg,$ph]:-} $(echo "$b - $a" | bc)"
  if [ -n "$before" ]; then
    after=$(rpcs "$cfg")
    while read -r proc n; do
      [ "$n" != 0 ] && PROCS[$proc]=1
      C[$cfg,$ph,$proc]="${C[$cfg,$ph,$proc]:-} $n"
    done < <(LC_ALL=C join <(echo "$before") <(echo "$after") | awk '{printf "%s %d\n", $1, $3 - $2}')
  fi
}
med() { printf '%s\n' ${T[$1]:-0} | median; }
# medc cfg phase proc: the median count of proc in the phase (0 if never called).
medc() { printf '%s\n' ${C[$1,$2,$3]:-0} | median; }
# medall cfg phase: the median over repetitions of all the phase's calls.
medall() {
  local cfg=$1 ph=$2 r proc tot
  local -a sums=()
  local n=$(printf '%s\n' ${T[$cfg,$ph]:-} | wc -w)
  for ((r = 1; r <= n; r++)); do
    tot=0
    for proc in "${!PROCS[@]}"; do
      set -- ${C[$cfg,$ph,$proc]:-}
      [ $# -ge $r ] && tot=$((tot + ${!r}))
    done
    sums+=("$tot")
  done
  printf '%s\n' "${sums[@]:-0}" | median
}

# rotate LIST k: LIST's words rotated left by k (the order of repetition k+1).
rotate() {
  local -a w=($1); local k=$(( $2 % ${#w[@]} ))
  echo "${w[@]:k} ${w[@]:0:k}"
}

# backing cfg: the directory that holds cfg's files below the mount.
backing() {
  case $1 in local|local-durable) echo "$W/local" ;; fuse|fuse-dio|fuse-null) echo "$W/fuse" ;; fuse-durable) echo "$W/durable" ;; *) echo "$W/export" ;; esac
}

# mount_cfg cfg cachedir: mounts cfg (for snfs modes with that cache directory,
# reused when given again) and sets MNT to the directory that stands for its root.
mount_cfg() {
  local cfg=$1 cache=$2
  case $cfg in
    local|local-durable) MNT="$W/local" ;;
    fuse)
      "$W/bin/fuseloop" ${FUSELOOP_OPTS:-} "$W/fuse" "$W/mnt/fuse" 2>>"$W/fuseloop.log" & FUSE_PID=$!
      for _ in $(seq 50); do mountpoint -q "$W/mnt/fuse" && break; sleep 0.1; done
      mountpoint -q "$W/mnt/fuse" || { echo "fuseloop did not mount" >&2; exit 1; }
      MNT="$W/mnt/fuse" ;;
    fuse-null)
      "$W/bin/fuseloop" -null "$W/fuse" "$W/mnt/fuse-null" 2>>"$W/fuseloop.log" & FUSE_NULL_PID=$!
      for _ in $(seq 50); do mountpoint -q "$W/mnt/fuse-null" && break; sleep 0.1; done
      mountpoint -q "$W/mnt/fuse-null" || { echo "fuseloop -null did not mount" >&2; exit 1; }
      MNT="$W/mnt/fuse-null" ;;
    fuse-dio)
      "$W/bin/fuseloop" -daemon-io "$W/fuse" "$W/mnt/fuse-dio" 2>>"$W/fuseloop.log" & FUSE_DIO_PID=$!
      for _ in $(seq 50); do mountpoint -q "$W/mnt/fuse-dio" && break; sleep 0.1; done
      mountpoint -q "$W/mnt/fuse-dio" || { echo "fuseloop -daemon-io did not mount" >&2; exit 1; }
      MNT="$W/mnt/fuse-dio" ;;
    fuse-durable)
      "$W/bin/fuseloop" -durable "$W/durable" "$W/mnt/fuse-durable" 2>>"$W/fuseloop.log" & FUSE_DUR_PID=$!
      for _ in $(seq 50); do mountpoint -q "$W/mnt/fuse-durable" && break; sleep 0.1; done
      mountpoint -q "$W/mnt/fuse-durable" || { echo "fuseloop -durable did not mount" >&2; exit 1; }
      MNT="$W/mnt/fuse-durable" ;;
    nfs*|snfs*)
      local extra=() mode=nfs port
      case $cfg in
        snfs-inf*) mode=snfs extra=(--cache-dir "$cache" --writeback-delay "$DELAY_INF") ;;
        snfs*) mode=snfs extra=(--cache-dir "$cache" --writeback-delay "$DELAY") ;;
      esac
      [ $mode = snfs ] && extra+=(${SNFS_OPTS:-}) # snfs mode only, e.g. SNFS_OPTS=--permits=on
      port=$(cfg_port "$cfg"); mkdir -p "$W/mnt/$cfg"
      "$(cfg_bin "$cfg")" mount --nfs-port "$port" --mount-port "$port" --mode $mode ${SNFS_MOUNT_OPTS:-} "${extra[@]}" \
        "127.0.0.1:$W/export" "$W/mnt/$cfg" >>"$W/mount-$cfg.log" 2>&1
      MNT="$W/mnt/$cfg" ;;
  esac
}
# umount_cfg cfg: unmounts cfg (snfs modes: after writing everything back); local: sync -f.
umount_cfg() {
  case $1 in
    local|local-durable) sync -f "$W/local" ;;
    fuse) umount "$W/mnt/fuse"; wait "$FUSE_PID" || true; FUSE_PID= ; sync -f "$W/fuse" ;;
    fuse-null) umount "$W/mnt/fuse-null"; wait "$FUSE_NULL_PID" || true; FUSE_NULL_PID= ;;
    fuse-dio) umount "$W/mnt/fuse-dio"; wait "$FUSE_DIO_PID" || true; FUSE_DIO_PID= ; sync -f "$W/fuse" ;;
    fuse-durable) umount "$W/mnt/fuse-durable"; wait "$FUSE_DUR_PID" || true; FUSE_DUR_PID= ; sync -f "$W/durable" ;;
    *) "$(cfg_bin "$1")" umount "$W/mnt/$1" ;;
  esac
}
