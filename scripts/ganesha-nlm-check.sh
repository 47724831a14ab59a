#!/bin/bash
# Manual check (not run by CI): `snfs mount --mode=nfs` locks (NLM) against
# nfs-ganesha 4.3 with NLM on. ganesha's NLM needs rpc.statd and rpcbind on its
# host; to leave the machine's own rpcbind (or its absence) alone, everything
# runs in a private network and mount namespace: its own lo (and a veth pair,
# so that glibc's AI_ADDRCONFIG resolves 127.0.0.1 and localhost), its own
# /run and /var/lib/nfs. Two nfs mode mounts of one ganesha export: flock -n
# exclusion, and a blocking flock granted (by polling: in one namespace the
# host's rpcbind lists ganesha's own NLM, so ganesha cannot call the mount
# back).
#
# Usage (root): go build -o /tmp/snfs ./cmd/snfs && scripts/ganesha-nlm-check.sh /tmp/snfs
# Prints RESULT lines; exit status 0 when all three are as wanted.
set -u
if [ "${1:-}" = --inside ]; then
	S=$2 W=$3
	ip link set lo up
	ip link add v0 type veth peer name v1 && ip addr add 10.99.0.1/24 dev v0 && ip link set v0 up && ip link set v1 up
	mount -t tmpfs tmpfs /run && mkdir -p /run/rpcbind /run/ganesha
	mount -t tmpfs tmpfs /var/lib/nfs && mkdir -p /var/lib/nfs/ganesha /var/lib/nfs/sm /var/lib/nfs/sm.bak
	mkdir -p $W/export $W/a $W/b && chmod 777 $W/export
	pids=()
	rpcbind -f -w >$W/rpcbind.log 2>&1 & pids+=($!)
	sleep 0.5
	rpc.statd -F --no-notify >$W/statd.log 2>&1 & pids+=($!)
	sleep 0.5
	# ganesha-peer's configuration, found as the tests find it: SNFS_GANESHA_PEER,
	# else shared/tools/ganesha-peer in a parent directory.
	peer=${SNFS_GANESHA_PEER:-}
	d=$(cd "$(dirname "$0")" && pwd)
	while [ -z "$peer" ] && [ "$d" != / ]; do
		[ -f "$d/shared/tools/ganesha-peer/ganesha.conf.in" ] && peer=$d/shared/tools/ganesha-peer
		d=$(dirname "$d")
	done
	conf=$peer/ganesha.conf.in
	sed -e "s#@EXPORT@#$W/export#g" -e "s#@NFS_PORT@#12049#g" -e "s#@MNT_PORT@#12048#g" \
		-e 's/Enable_NLM = false;/Enable_NLM = true;/' -e '/Bind_addr/d' "$conf" >$W/ganesha.conf
	ganesha.nfsd -f $W/ganesha.conf -L $W/ganesha.log -p $W/ganesha.pid -N NIV_EVENT -F >$W/ganesha.out 2>&1 & pids+=($!)
	for i in $(seq 100); do rpcinfo -p 2>/dev/null | grep -q nlockmgr && break; sleep 0.2; done
	ok=0
	$S mount --nfs-port 12049 --mount-port 12048 --log-level debug --log-file $W/a.log 127.0.0.1:$W/export $W/a &&
		$S mount --nfs-port 12049 --mount-port 12048 --log-level debug --log-file $W/b.log 127.0.0.1:$W/export $W/b ||
		{ echo "RESULT the mounts failed"; kill "${pids[@]}"; wait; exit 1; }
	touch $W/a/db
	flock -n $W/a/db sleep 3 & holder=$!
	sleep 1
	flock -n $W/b/db true; r=$?; echo "RESULT flock -n through b while a holds it: exit $r (want 1)"; [ $r = 1 ] || ok=1
	wait $holder
	flock -n $W/b/db true; r=$?; echo "RESULT flock -n through b after a's holder exited: exit $r (want 0)"; [ $r = 0 ] || ok=1
	flock $W/a/db sleep 2 & holder=$!
	sleep 0.5
	start=$(date +%s%N)
	flock $W/b/db true; r=$?
	echo "RESULT blocking flock through b: exit $r (want 0) after $(( ($(date +%s%N) - start) / 1000000 )) ms"; [ $r = 0 ] || ok=1
	wait $holder
	$S umount $W/a; $S umount $W/b
	kill "${pids[@]}"; wait
	exit $ok
fi
S=${1:?usage: $0 PATH-TO-SNFS-BINARY}
W=$(mktemp -d /var/tmp/snfs-ganesha-nlm-XXXXXX)
echo "work directory (logs): $W"
unshare --net --mount --propagation private "$0" --inside "$S" "$W"
