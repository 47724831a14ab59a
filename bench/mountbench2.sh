#!/usr/bin/env bash
# The other benchmarks of issue 14 through `snfs mount`, in the configurations of
# bench/mountlib.sh (local disk, FUSE loopback, nfs mode, snfs mode), measured in one
# run: the configurations alternate (the first one rotating) in each of $REPS
# repetitions, every figure is a median, and for the mounts of snfs serve the
# server's RPCs per procedure are scraped from its --metrics before and after each
# phase. Parts ($PARTS, default all three):
#
#   sort  LC_ALL=C sort -S 16M -T DIR -o DIR/out of a $SORT_MIB MiB text file (read
#         from the page cache, outside the mount), temporaries and output on the mount;
#         snfs mode twice: --writeback-delay $DELAY and $DELAY_INF (snfs-inf); the floors
#         fuse, fuse-dio and fuse-durable (bench/mountlib.sh) besides. The sort
#         is timed up to its exit; the unmount (which writes the output back) apart.
#   read  a $READ_MIB MiB file put into each configuration's backing file system, caches
#         dropped, read once (read1, cold), at once again (read2, cached), then
#         unmount, remount with the same cache directory, caches dropped, read again
#         (read3, warm remount). `dd bs=1M` each time.
#   meta  create+close+unlink of $NFILES files (one after the other), mkdir+rmdir of
#         $NFILES directories, untar of Go's source tree ($(go env GOROOT)/$TREE, a
#         tarball cached in $DATA), unmount, remount, caches dropped, `ls -lR` of the
#         tree (cold) and at once again (warm).
#
# "Caches dropped" is `sync; echo 3 > /proc/sys/vm/drop_caches`, the same for every
# configuration (the local disk has no unmount; its image stays mounted).
# Writes bench/results/mountbench2-<date>.md.
#
#   bash bench/mountbench2.sh (as root)   # REPS=3; PARTS="sort read meta"; DELAY=30s DELAY_INF=1h
#   SNFS_BIN (a built snfs instead of building one), OUT (the result file): see bench/mountab.sh
#   REPS=1 SORT_MIB=8 READ_MIB=16 NFILES=50 TREE=src/fmt bash bench/mountbench2.sh   # a quick check
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export PATH="$PATH:/usr/local/go/bin"
REPS=${REPS:-3}
PARTS=${PARTS:-sort read meta}
DELAY=${DELAY:-30s} DELAY_INF=${DELAY_INF:-1h}
SORT_MIB=${SORT_MIB:-200} READ_MIB=${READ_MIB:-256} NFILES=${NFILES:-1000} TREE=${TREE:-src}
W=/var/tmp/snfs-mountbench2
DATA=${DATA:-/var/tmp/snfs-bench-data} # generated inputs, kept between runs
IMG=${IMG:-8G}
PORT=${PORT:-23051} MPORT=${MPORT:-23101} # not the defaults, nor mountbench.sh's: the machine is shared
CONFIGS=${CONFIGS:-local fuse nfs snfs} # bench/mountab.sh leaves fuse out: it compares two snfs binaries
SORT_CONFIGS=${SORT_CONFIGS:-local fuse fuse-dio fuse-durable nfs snfs snfs-inf}
. bench/mountlib.sh

# Inputs, generated deterministically once. The sort input: lines of base64 of
# AES-CTR with a fixed key (fast, and the same bytes on every machine).
mkdir -p "$DATA"
SORT_IN="$DATA/sort-$SORT_MIB.txt" BIG="$DATA/read-$READ_MIB.bin"
GOV=$(go env GOVERSION)
TARBALL="$DATA/go-$GOV-$(echo "$TREE" | tr / _).tar"
stream() { openssl enc -aes-128-ctr -K 736e6673 -iv 0 -nosalt </dev/zero 2>/dev/null; }
# (head ends the stream with SIGPIPE, hence no pipefail there)
[ -s "$SORT_IN" ] || { (set +o pipefail; stream | base64 -w 99 | head -c $((SORT_MIB << 20)) >"$SORT_IN.tmp"); echo >>"$SORT_IN.tmp"; mv "$SORT_IN.tmp" "$SORT_IN"; }
[ -s "$BIG" ] || { (set +o pipefail; stream | head -c $((READ_MIB << 20)) >"$BIG.tmp"); mv "$BIG.tmp" "$BIG"; }
[ -s "$TARBALL" ] || { tar cf "$TARBALL.tmp" -C "$(go env GOROOT)" "$TREE"; mv "$TARBALL.tmp" "$TARBALL"; }
TREE_ENTRIES=$(tar tf "$TARBALL" | wc -l)

trap cleanup EXIT
setup_images
start_server

declare -A SUM # SUM[cfg,rep]: sha256 of the sorted output
has() { [[ " $PARTS " == *" $1 "* ]]; }

part_sort() { # cfg rep
  local cfg=$1 i=$2 d b
  mount_cfg "$cfg" "$W/cache/sort-$cfg-r$i"
  d="$MNT/sort-$cfg-r$i"; mkdir -p "$d/tmp"
  cat "$SORT_IN" >/dev/null # the input comes from the page cache in every configuration
  phase "$cfg" sort env LC_ALL=C sort -S 16M -T "$d/tmp" -o "$d/out" "$SORT_IN"
  [ -z "$(ls -A "$d/tmp")" ] || { echo "$cfg: sort left temporaries behind" >&2; exit 1; }
  phase "$cfg" sort-umount umount_cfg "$cfg"
  b="$(backing "$cfg")/sort-$cfg-r$i"
  SUM[$cfg,$i]=$(sha256sum <"$b/out" | cut -d' ' -f1)
  rm -rf "$b" "$W/cache/sort-$cfg-r$i"
}

part_read() { # cfg rep
  local cfg=$1 i=$2 f b
  b="$(backing "$cfg")/read-$cfg-r$i"
  mkdir "$b"; cp "$BIG" "$b/big"
  mount_cfg "$cfg" "$W/cache/read-$cfg-r$i"
  f="$MNT/read-$cfg-r$i/big"
  drop_caches
  phase "$cfg" read1 dd if="$f" of=/dev/null bs=1M
  phase "$cfg" read2 dd if="$f" of=/dev/null bs=1M
  phase "$cfg" read-umount umount_cfg "$cfg"
  mount_cfg "$cfg" "$W/cache/read-$cfg-r$i"
  drop_caches
  phase "$cfg" read3 dd if="$f" of=/dev/null bs=1M
  cmp "$f" "$BIG"
  umount_cfg "$cfg"
  rm -rf "$b" "$W/cache/read-$cfg-r$i"
}

files() { perl -e 'my ($d, $n) = @ARGV; for my $i (1 .. $n) {
  open(my $f, ">", "$d/f$i") or die "create $d/f$i: $!"; close($f) or die "close: $!";
  unlink("$d/f$i") or die "unlink $d/f$i: $!" }' "$1" "$NFILES"; }
dirs() { perl -e 'my ($d, $n) = @ARGV; for my $i (1 .. $n) {
  mkdir("$d/d$i") or die "mkdir $d/d$i: $!"; rmdir("$d/d$i") or die "rmdir $d/d$i: $!" }' "$1" "$NFILES"; }

part_meta() { # cfg rep
  local cfg=$1 i=$2 d b n
  # The fuse floor of the metadata part caches all it can (bench/fuseloop
  # -cached): warm ls -lR is a test of the kernel's caches.
  FUSELOOP_OPTS=-cached mount_cfg "$cfg" "$W/cache/meta-$cfg-r$i"
  d="$MNT/meta-$cfg-r$i"; mkdir "$d"
  phase "$cfg" files files "$d"
  phase "$cfg" dirs dirs "$d"
  cat "$TARBALL" >/dev/null # the tarball comes from the page cache in every configuration
  phase "$cfg" untar tar xf "$TARBALL" -C "$d"
  phase "$cfg" meta-umount umount_cfg "$cfg"
  FUSELOOP_OPTS=-cached mount_cfg "$cfg" "$W/cache/meta-$cfg-r$i"
  drop_caches
  phase "$cfg" ls-cold ls -lR "$d"
  phase "$cfg" ls-warm ls -lR "$d"
  umount_cfg "$cfg"
  b="$(backing "$cfg")/meta-$cfg-r$i"
  n=$(cd "$b" && find "$TREE" | wc -l)
  [ "$n" = "$TREE_ENTRIES" ] || { echo "$cfg: $n entries after untar, the tarball has $TREE_ENTRIES" >&2; exit 1; }
  rm -rf "$b" "$W/cache/meta-$cfg-r$i"
}

for i in $(seq "$REPS"); do
  for part in $PARTS; do
    cfgs=$CONFIGS; [ "$part" = sort ] && cfgs=$SORT_CONFIGS
    order=$(rotate "$cfgs" $((i - 1)))
    echo "rep $i $part: $order" >&2
    for cfg in $order; do "part_$part" "$cfg" "$i"; done
  done
done
if has sort; then
  for k in "${!SUM[@]}"; do
    [ "${SUM[$k]}" = "${SUM[local,1]}" ] || { echo "sorted output of $k differs from the local disk's" >&2; exit 1; }
  done
fi

# table "phases" "cfgs" [unit]: medians, seconds, with ratios against local and nfs;
# with unit=MiB/s also the throughput $2 MiB / seconds.
table() {
  local phases=$1 cfgs=$2 mib=${3:-} ph cfg line
  line="| phase |"; for cfg in $cfgs; do line="$line $cfg |"; done
  for cfg in $cfgs; do case $cfg in local|nfs) ;; *) line="$line $cfg/local | $cfg/nfs |" ;; esac; done
  echo "$line nfs/local |"
  echo "$line" | sed 's/[^|][^|]*/---/g; s/$/---|/'
  for ph in $phases; do
    line="| $ph |"
    for cfg in $cfgs; do
      if [ -n "$mib" ]; then line="$line $(f2 "$(med "$cfg,$ph")") s ($(awk -v m="$mib" -v t="$(med "$cfg,$ph")" 'BEGIN{printf "%.0f", m / t}') MiB/s) |"
      else line="$line $(f2 "$(med "$cfg,$ph")") |"; fi
    done
    for cfg in $cfgs; do case $cfg in local|nfs) ;; *)
      line="$line $(ratio "$(med "$cfg,$ph")" "$(med "local,$ph")") | $(ratio "$(med "$cfg,$ph")" "$(med "nfs,$ph")") |" ;; esac; done
    echo "$line $(ratio "$(med "nfs,$ph")" "$(med "local,$ph")") |"
  done
}
# rpc_table "phases" "cfgs": the server's calls per procedure and phase (medians).
rpc_table() {
  local phases=$1 cfgs=$2 ph cfg proc line any
  line="| phase | procedure |"; for cfg in $cfgs; do line="$line $cfg |"; done
  echo "$line"; echo "$line" | sed 's/[^|][^|]*/---/g'
  for ph in $phases; do
    for proc in $(printf '%s\n' "${!PROCS[@]}" | sort); do
      line="| $ph | $proc |" any=
      for cfg in $cfgs; do n=$(medc "$cfg" "$ph" "$proc"); [ "$n" != 0 ] && any=1; line="$line $n |"; done
      [ -n "$any" ] && echo "$line"
    done
    line="| $ph | **all** |"; for cfg in $cfgs; do line="$line **$(medall "$cfg" "$ph")** |"; done
    echo "$line"
  done
}
verdict() { awk "BEGIN{print ($1) ? \"met\" : \"not met\"}"; }

out=${OUT:-bench/results/mountbench2-$(date -u +%Y%m%d-%H%M).md}
{
  echo "# snfs mount: sort, cached reads, metadata (issue 14)"
  echo
  echo "Command: \`REPS=$REPS PARTS=\"$PARTS\" SORT_MIB=$SORT_MIB READ_MIB=$READ_MIB NFILES=$NFILES TREE=$TREE DELAY=$DELAY DELAY_INF=$DELAY_INF bash bench/mountbench2.sh\`"
  echo "on $(date -u '+%Y-%m-%d %H:%M') UTC, $(nproc) cores, $(free -g | awk '/^Mem/{print $2}') GiB, $(uname -r), ${NOTE:-a shared machine}."
  echo "Each of local, fuse's backing directory and the export is its own ext4 image ($IMG, journaled, on /var/tmp, loop-mounted with direct I/O);"
  echo "snfs serve on 127.0.0.1:$PORT (\`rw,no_root_squash\`, a sync export); snfs mode's cache directory on /var/tmp ($(df -T /var/tmp | awk 'NR==2{print $2}'), not a loop image), \`--writeback-delay $DELAY\` (snfs-inf: $DELAY_INF); fuse-durable's backing directory on /var/tmp too."
  echo "Medians of $REPS repetitions, seconds; within each repetition and part the configurations alternate, the first one rotating. Ratios above 1 are slower."
  echo "RPCs are the server's (\`snfs_server_rpc_total\`, scraped before and after each phase), medians over the repetitions."
  if has sort; then
    echo
    echo "## sort"
    echo
    echo "\`LC_ALL=C sort -S 16M -T DIR/tmp -o DIR/out\` of a $SORT_MIB MiB text file ($(wc -l <"$SORT_IN") lines of 99 base64 characters), the input read from the page cache outside the mount, temporaries and output on the mount."
    echo "**sort** is the sort up to its exit, before the unmount; the sorted output is still dirty in snfs mode then and is written back at the unmount, timed apart (**sort-umount**; local: \`sync -f\`)."
    echo "The output was checked identical in every configuration."
    echo
    table "sort sort-umount" "local fuse fuse-dio fuse-durable nfs snfs snfs-inf"
    echo
    rpc_table "sort sort-umount" "nfs snfs snfs-inf"
    echo
    s=$(med snfs-inf,sort) l=$(med local,sort) w=$(medc snfs-inf sort nfs/WRITE)
    echo "Target: sort with an infinite delay within 1.1x of the local disk with zero WRITE RPCs (sort phase, before the unmount): **$(verdict "$s <= 1.1 * $l && $w == 0")** (snfs-inf/local $(ratio "$s" "$l"), $w WRITE RPCs; default delay: snfs/local $(ratio "$(med snfs,sort)" "$l"), $(medc snfs sort nfs/WRITE) WRITE RPCs)."
    d=$(med fuse-durable,sort)
    floor="fuse-durable (bench/fuseloop -durable on the file system of snfs mode's cache directory: go-fuse's loopback, every open passed through to the backing file with FUSE passthrough, and every close of an open for writing made durable with fdatasync first) sorts in $(ratio "$d" "$l")x the local disk's time. It is the least any FUSE file system costs whose \`close(2)\` returns only once the written data is on the local disk, which snfs mode's must (a crash of the mount process or of the machine must not lose what close returned: docs/mount.md, \"Durable close\")"
    if [ "$(verdict "$s <= 1.1 * $l && $w == 0")" = met ]; then
      echo "Floor: $floor; snfs-inf is $(ratio "$s" "$d")x that floor."
    else
      echo "Bound: $floor. So the target is **$(verdict "$d <= 1.1 * $l" | sed 's/not met/out of reach by this bound/; s/^met$/within reach by this bound/')**; snfs-inf is $(ratio "$s" "$d")x that floor."
    fi
    echo "Other floors: fuse (the same loopback with no fdatasync, the least any FUSE file system costs) $(ratio "$(med fuse,sort)" "$l")x the local disk; fuse-dio (bench/fuseloop -daemon-io: no passthrough, each read and write a FUSE request to a daemon that does nothing but the system call, the least a file system that sees every write costs) $(ratio "$(med fuse-dio,sort)" "$l")x. snfs mode's write opens pass through to the cache file too (through a watched mount of its file system, so that the mount can become the file's pinned holder if another client opens it: mount/vfs/pinned.go): no \`write(2)\` of sort reaches the mount."
  fi
  if has read; then
    echo
    echo "## Reads of a $READ_MIB MiB file"
    echo
    echo "The file is copied into each configuration's backing file system (for nfs and snfs the export, behind the server), then the mount is made (snfs: an empty cache directory), caches are dropped and"
    echo "**read1** reads it (cold: from the disk, through the server for nfs and snfs), **read2** reads it again at once (cached: for the local disk from its page cache too, no drop: that is the fair comparison of a client's cache with the local disk's),"
    echo "then the mount is unmounted and mounted again (snfs: the same cache directory), caches are dropped and **read3** reads it (warm remount: the local disk reads its disk, snfs mode its cache directory)."
    echo "\`dd if=FILE of=/dev/null bs=1M\`."
    echo
    table "read1 read2 read3" "$CONFIGS" "$READ_MIB"
    echo
    rpc_table "read1 read2 read-umount read3" "nfs snfs"
    echo
    echo "Target: cached reads at least 0.8x the local disk (read2 throughput): **$(verdict "$(med local,read2) / $(med snfs,read2) >= 0.8")** (snfs/local throughput $(ratio "$(med local,read2)" "$(med snfs,read2)"); nfs mode $(ratio "$(med local,read2)" "$(med nfs,read2)"))."
    echo "Target: a warm-cache remount reads the cached file with zero READ RPCs (read3): **$(verdict "$(medc snfs read3 nfs/READ) == 0")** ($(medc snfs read3 nfs/READ) READ RPCs; nfs mode, which has no persistent cache: $(medc nfs read3 nfs/READ)); read3 throughput snfs/local $(ratio "$(med local,read3)" "$(med snfs,read3)")."
  fi
  if has meta; then
    echo
    echo "## Metadata: create/unlink, mkdir/rmdir, untar, ls -lR"
    echo
    echo "**files**: $NFILES times create, close, unlink of one file (one perl process); **dirs**: $NFILES times mkdir, rmdir; **untar**: \`tar xf\` of \`\$(go env GOROOT)/$TREE\` ($GOV, $TREE_ENTRIES entries, $(( $(stat -c %s "$TARBALL") >> 20 )) MiB, the tarball read from the page cache);"
    echo "then the unmount (**meta-umount**, snfs mode writes the tree's data back), a new mount (snfs: the same cache directory), caches dropped, **ls-cold**: \`ls -lR\` of the tree, **ls-warm**: the same at once again."
    echo
    table "files dirs untar meta-umount ls-cold ls-warm" "$CONFIGS"
    echo
    rpc_table "files dirs untar meta-umount ls-cold ls-warm" "nfs snfs"
    echo
    echo "Target: warm \`ls -lR\` within 1.5x of the local disk with zero RPCs: **$(verdict "$(med snfs,ls-warm) <= 1.5 * $(med local,ls-warm) && $(medall snfs ls-warm) == 0")** (snfs/local $(ratio "$(med snfs,ls-warm)" "$(med local,ls-warm)"), $(medall snfs ls-warm) RPCs; nfs mode $(ratio "$(med nfs,ls-warm)" "$(med local,ls-warm)"), $(medall nfs ls-warm) RPCs)."
    echo "Bound: the fuse configuration here is bench/fuseloop -cached, a FUSE file system that answers everything it can from the kernel's caches (1 h timeouts, kept pages and listings; the kernel still sends an OPENDIR and a GETATTR per directory, as it does to snfs mode): its warm \`ls -lR\` is $(ratio "$(med fuse,ls-warm)" "$(med local,ls-warm)")x the local disk's, so the target is **$(verdict "$(med fuse,ls-warm) <= 1.5 * $(med local,ls-warm)" | sed 's/not met/out of reach by this bound/; s/^met$/within reach by this bound/')**; snfs mode is $(ratio "$(med snfs,ls-warm)" "$(med fuse,ls-warm)")x that floor."
  fi
  echo
  echo "Every run, in order (seconds):"
  echo
  echo '```'
  for k in $(printf '%s\n' "${!T[@]}" | sort -t, -k2,2 -k1,1); do printf '%-10s %-9s %s\n' "${k#*,}" "${k%%,*}" "$(echo ${T[$k]})"; done
  echo '```'
} >"$out"
cat "$out"
