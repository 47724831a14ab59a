#!/bin/bash
# Manual check (not run by CI): `snfs mount --mode=nfs` locks (NLM) against
# nfs-ganesha 4.3 with NLM on, as two hosts: host B runs rpcbind, rpc.statd
# (ganesha's NLM needs it) and ganesha; host A runs rpcbind and two nfs mode
# mounts. Each host is a private network and mount namespace (its own /run and
# /var/lib/nfs, so the machine's own rpcbind, or its absence, is left alone),
# joined by a veth pair: A is 10.99.0.1, B 10.99.0.2. Checks: flock -n
# excludes across the mounts; a blocking flock through the mount listed in A's
# rpcbind (the first) is granted by ganesha's callback, well before the 5 s
# poll would; so is one through the other mount (the first passes the
# GRANTED on).
#
# Usage (root): go build -o /tmp/snfs ./cmd/snfs && scripts/ganesha-nlm-check.sh /tmp/snfs
# Prints RESULT lines; exit status 0 when all are as wanted. Logs stay in the
# work directory it names.
set -u
case "${1:-}" in
--server)
	W=$2 conf=$3
	for i in $(seq 100); do [ -e $W/veth-ready ] && break; sleep 0.1; done
	ip link set lo up && ip addr add 10.99.0.2/24 dev vB && ip link set vB up
	mount -t tmpfs tmpfs /run && mkdir -p /run/rpcbind /run/ganesha
	mount -t tmpfs tmpfs /var/lib/nfs && mkdir -p /var/lib/nfs/ganesha /var/lib/nfs/sm /var/lib/nfs/sm.bak
	mkdir -p $W/export && chmod 777 $W/export
	pids=()
	rpcbind -f -w >$W/b-rpcbind.log 2>&1 & pids+=($!)
	sleep 0.5
	rpc.statd -F -d --no-notify >$W/b-statd.log 2>&1 & pids+=($!)
	sleep 0.5
	sed -e "s#@EXPORT@#$W/export#g" -e "s#@NFS_PORT@#12049#g" -e "s#@MNT_PORT@#12048#g" \
		-e 's/Enable_NLM = false;/Enable_NLM = true;/' -e '/Bind_addr/d' -e 's/Clients = 127.0.0.1;/Clients = *;/' \
		"$conf" >$W/ganesha.conf
	ganesha.nfsd -f $W/ganesha.conf -L $W/ganesha.log -p $W/ganesha.pid -N NIV_EVENT -F >$W/ganesha.out 2>&1 & pids+=($!)
	for i in $(seq 100); do rpcinfo -p 2>/dev/null | grep -q nlockmgr && break; sleep 0.2; done
	rpcinfo -p >$W/b-rpcinfo.txt
	touch $W/server-ready
	for i in $(seq 1500); do [ -e $W/done ] && break; sleep 0.2; done
	kill "${pids[@]}"; wait
	exit 0
	;;
--client)
	W=$2 S=$3
	for i in $(seq 100); do [ -e $W/veth-ready ] && break; sleep 0.1; done
	ip link set lo up && ip addr add 10.99.0.1/24 dev vA && ip link set vA up
	mount -t tmpfs tmpfs /run && mkdir -p /run/rpcbind
	pids=()
	rpcbind -f -w >$W/a-rpcbind.log 2>&1 & pids+=($!)
	for i in $(seq 300); do [ -e $W/server-ready ] && break; sleep 0.1; done
	mkdir -p $W/a $W/b
	ok=0
	if ! $S mount --nfs-port 12049 --mount-port 12048 --log-level debug --log-file $W/a.log 10.99.0.2:$W/export $W/a ||
		! $S mount --nfs-port 12049 --mount-port 12048 --log-level debug --log-file $W/b.log 10.99.0.2:$W/export $W/b; then
		echo "RESULT the mounts failed"
		kill "${pids[@]}"; wait; exit 1
	fi
	rpcinfo -p >$W/a-rpcinfo.txt
	touch $W/a/db
	flock -n $W/a/db sleep 3 & holder=$!
	sleep 1
	flock -n $W/b/db true; r=$?
	echo "RESULT flock -n through b while a holds it: exit $r (want 1)"; [ $r = 1 ] || ok=1
	wait $holder
	flock -n $W/b/db true; r=$?
	echo "RESULT flock -n through b after a's holder exited: exit $r (want 0)"; [ $r = 0 ] || ok=1
	flock $W/b/db sleep 2 & holder=$!
	sleep 0.5
	start=$(date +%s%N)
	flock $W/a/db true; r=$?
	ms=$(( ($(date +%s%N) - start) / 1000000 ))
	echo "RESULT blocking flock through a while b holds it for 1.5 s more: exit $r after $ms ms (want 0, under 4000 ms: by ganesha's callback, not the 5 s poll)"
	[ $r = 0 ] && [ $ms -lt 4000 ] || ok=1
	wait $holder
	flock $W/a/db sleep 2 & holder=$!
	sleep 0.5
	start=$(date +%s%N)
	flock $W/b/db true; r=$?
	ms=$(( ($(date +%s%N) - start) / 1000000 ))
	echo "RESULT blocking flock through b (not listed: a passes the GRANTED on) while a holds it for 1.5 s more: exit $r after $ms ms (want 0, under 4000 ms)"
	[ $r = 0 ] && [ $ms -lt 4000 ] || ok=1
	wait $holder
	$S umount $W/a; $S umount $W/b
	kill "${pids[@]}"; wait
	exit $ok
	;;
--*)
	echo "unknown mode $1" >&2
	exit 2
	;;
esac
S=${1:?usage: $0 PATH-TO-SNFS-BINARY}
# ganesha-peer's configuration, found as the tests find it: SNFS_GANESHA_PEER,
# else shared/tools/ganesha-peer in a parent directory.
peer=${SNFS_GANESHA_PEER:-}
d=$(cd "$(dirname "$0")" && pwd)
while [ -z "$peer" ] && [ "$d" != / ]; do
	[ -f "$d/shared/tools/ganesha-peer/ganesha.conf.in" ] && peer=$d/shared/tools/ganesha-peer
	d=$(dirname "$d")
done
[ -n "$peer" ] || { echo "shared/tools/ganesha-peer not found (set SNFS_GANESHA_PEER)" >&2; exit 2; }
W=$(mktemp -d /var/tmp/snfs-ganesha-nlm-XXXXXX)
echo "work directory (logs): $W"
unshare --net --mount --propagation private "$0" --server "$W" "$peer/ganesha.conf.in" & BP=$!
unshare --net --mount --propagation private "$0" --client "$W" "$S" & AP=$!
sleep 0.5
ip link add vA type veth peer name vB && ip link set vA netns $AP && ip link set vB netns $BP
touch $W/veth-ready
wait $AP; ok=$?
touch $W/done
wait $BP
exit $ok
