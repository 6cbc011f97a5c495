# rsocket-loop.sh - rsocket interop pairs run many times in one boot, to
# catch what fails once in many runs (issue 15's kernel-fabric hangs).
#
# Runs inside the test VM with the static Go binaries of
# scripts/interop-rsocket.sh (RSOCKET_SCRIPT=rsocket-loop.sh there).
# Env: LOOP_PAIRS, a list of FABRIC:DEVICE:PROG:SIZE:COUNT:ROLE (ROLE csrv:
# the C server with a Go client; gosrv: the Go server with a C client;
# cc: C against C, the baseline),
# default the two pairs that hung in CI; LOOP_N rounds (20); LOOP_T
# seconds a pair may take (40); LOOP_LOAD=1 keeps a busy loop running
# beside the pairs. A pair that outlives LOOP_T is reported as HANG with
# the queue pairs' state, the processes' threads and the Go side's
# goroutines (SIGQUIT, GOTRACEBACK=all). LOOP_PRE, a shell command run
# once before the pairs (e.g. a sysctl that narrows TCP's buffers, so
# that sent data waits longer in the socket).
. /tests/lib.sh
export GOTRACEBACK=all
N=${LOOP_N:-20} T=${LOOP_T:-40}
pairs=${LOOP_PAIRS:-"kernel:siw0:rstream:65536:20:csrv kernel:rxe0:rstream:1048576:4:gosrv"}
[ -z "${LOOP_PRE:-}" ] || sh -c "$LOOP_PRE"
if [ -n "${LOOP_LOAD:-}" ]; then
	(while :; do :; done) &
	loadpid=$!
fi
bad=0 ok=0

# dump PID...: what the hung processes are doing.
dump() {
	echo "--- rdma res qp:"
	rdma res show qp 2>&1
	for p in "$@"; do
		kill -0 "$p" 2>/dev/null || continue
		echo "--- pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline")"
		for t in /proc/"$p"/task/*; do
			echo "task $t: $(cat "$t/wchan" 2>/dev/null) $(cut -d' ' -f3 "$t/stat")"
		done
	done
	for p in "$@"; do
		case "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" in
		go-*) kill -QUIT "$p" ;;
		esac
	done
	sleep 2
}

# runone ROUND FABRIC DEVICE PROG SIZE COUNT ROLE
runone() {
	r=$1 fab=$2 dev=$3 prog=$4 s=$5 c=$6 role=$7
	case $dev in
	rxe0) ip=$RXE_IP ;;
	*) ip=$SIW_IP ;;
	esac
	export CMRT_FABRIC=$fab
	args="-S $s -C $c -T v"
	case $role in
	csrv) srv="$prog -b $ip $args" cli="go-$prog -s $ip $args" ;;
	cc) srv="$prog -b $ip $args" cli="$prog -s $ip $args" ;;
	*) srv="go-$prog -b $ip $args" cli="$prog -s $ip $args" ;;
	esac
	tag="$r $fab:$dev $prog -S $s -C $c $role"
	t0=$(up)
	sh -c "exec $srv" >/tmp/srv.out 2>&1 &
	spid=$!
	sleep "${PAIR_DELAY:-2}"
	sh -c "exec $cli" >/tmp/cli.out 2>&1 &
	cpid=$!
	k=0
	while [ $k -lt "$T" ] && { kill -0 $spid 2>/dev/null || kill -0 $cpid 2>/dev/null; }; do
		sleep 1
		k=$((k + 1))
	done
	if [ $k -ge "$T" ]; then
		bad=$((bad + 1))
		echo "=== HANG $tag (after ${T}s)"
		dump $spid $cpid
		kill -9 $spid $cpid 2>/dev/null
		wait $spid 2>/dev/null
		wait $cpid 2>/dev/null
		echo "--- server output:"
		cat /tmp/srv.out
		echo "--- client output:"
		cat /tmp/cli.out
		return
	fi
	wait $spid
	src=$?
	wait $cpid
	crc=$?
	if [ $src != 0 ] || [ $crc != 0 ] || grep -q 'verification failed' /tmp/srv.out /tmp/cli.out; then
		bad=$((bad + 1))
		echo "=== FAIL $tag: server rc=$src, client rc=$crc"
		cat /tmp/srv.out /tmp/cli.out
	else
		ok=$((ok + 1))
		echo "ok $tag $(elapsed "$t0")s"
	fi
}

i=0
while [ $i -lt "$N" ]; do
	for p in $pairs; do
		IFS=: read -r fab dev prog s c role <<EOF
$p
EOF
		runone $i "$fab" "$dev" "$prog" "$s" "$c" "$role"
	done
	i=$((i + 1))
done
[ -z "${loadpid:-}" ] || kill "$loadpid"
echo
echo "=== LOOP: $ok ok, $bad bad"
result rsocket-loop "$bad" 0
summary
