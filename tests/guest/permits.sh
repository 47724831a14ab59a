# Runs in the Linux guest (--host-root), cwd = the NFS mount: the stock
# client's turns beside a mount that changes d locally under its write-back
# permit (TestMountSNFSPermitsLinuxGuestMidBurst). Round i, by files in sync/:
# the guest says it is ready (ready.i) and waits for the host's go.i (the
# names to stat, one a line; "end": the last round); then creates d/guest.i
# (which recalls the permit), lists d, stats the names, and answers with
# ls.i and stat.i, then done.i. At "end" it lists d into final and stops.
# The host checks what it wrote; the guest checks only what is its own.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
wait_for() {
	n=0
	until [ -e "$1" ]; do
		n=$((n + 1))
		[ $n -lt 6000 ] || fail "no $1 after 120 s"
		sleep 0.02
	done
}
i=0
while :; do
	touch sync/ready.$i
	wait_for sync/go.$i
	if [ "$(cat sync/go.$i)" = end ]; then
		ls -1a d >sync/final.tmp
		mv sync/final.tmp sync/final
		break
	fi
	touch d/guest.$i
	ls -1a d >sync/ls.$i.tmp
	grep -qx "guest.$i" sync/ls.$i.tmp || fail "round $i: the guest does not list its own d/guest.$i"
	: >sync/stat.$i.tmp
	while read -r name; do
		if st=$(stat -c '%F' "d/$name" 2>/dev/null); then
			echo "$name $st" >>sync/stat.$i.tmp
		else
			echo "$name gone" >>sync/stat.$i.tmp
		fi
	done <sync/go.$i
	mv sync/ls.$i.tmp sync/ls.$i
	mv sync/stat.$i.tmp sync/stat.$i
	touch sync/done.$i
	i=$((i + 1))
done
echo "--- all checks passed"
