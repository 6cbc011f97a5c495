# kernel-bench.sh - the kernel fabric's data path against rdma-core in one
# VM boot, for BENCHMARKS.md part 7: cmtime with real QPs (rdma-core 44's
# against cmrt's Go cmtime on the kernel fabric, same connection count, on
# rxe0 and siw0) and message ping-pong latency (rdma-core's ibv_rc_pingpong
# against kcheck pp-server/pp-client, its Go counterpart, on rxe0, event
# driven and busy polling, the latter also with GOMAXPROCS=1, as single
# threaded as the C program; and rping without -v, C against Go). Each case
# runs KB_REPS times, the order of C and Go alternating. Needs go-cmtime,
# go-rping and kcheck in /extra; with kcheck-base there too (a kcheck built
# from another tree: scripts/interop-kernel.sh --bench with KB_BASE_KCHECK)
# the busy ping-pong also runs with it, for a before/after in one boot.
# Run by scripts/interop-kernel.sh --bench.
#
# Env: KB_N (cmtime connections, 50: siw allows 71 QPs per process),
# KB_ITERS (ping-pong iterations, 1000), KB_PINGS (rping iterations, 300),
# KB_REPS (3).
. /tests/lib.sh
N=${KB_N:-50}
IT=${KB_ITERS:-1000}
PINGS=${KB_PINGS:-300}
R=${KB_REPS:-3}
export PAIR_DELAY=${PAIR_DELAY:-1}
echo "KB_N=$N KB_ITERS=$IT KB_PINGS=$PINGS KB_REPS=$R"
grep -m1 'model name' /proc/cpuinfo
echo "vCPUs: $(grep -c ^processor /proc/cpuinfo)"

# The RoCE v2 GID of rxe0's IPv4 address, which ibv_rc_pingpong needs.
G=$(for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
	n=${f##*/}
	if grep -q "ffff:0a00:0001" "$f" && grep -q "v2" /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$n; then echo "$n"; fi
done | head -1)
echo "rxe0 RoCE v2 GID index: $G"


cm_c() { PERSIST=1 pair "cmtime-$1-c-$2" 120 "cmtime -b $3 -p $4 -c $N" "cmtime -s $3 -p $4 -c $N"; }
cm_go() { PERSIST=1 pair "cmtime-$1-go-$2" 120 "env CMRT_FABRIC=kernel go-cmtime -b $3 -p $4 -O 0 -c $N" "env CMRT_FABRIC=kernel go-cmtime -s $3 -p $4 -O 0 -c $N"; }
pp_c() { pair "pp-rxe$1-c-$2" 300 "ibv_rc_pingpong -d rxe0 -g $G -n $IT $1" "ibv_rc_pingpong -d rxe0 -g $G -n $IT $1 127.0.0.1"; }
pp_go() { pair "pp-rxe$1-go-$2" 300 "kcheck pp-server -b $RXE_IP -p $3 -iters $IT $1 -t 280s" "kcheck pp-client -s $RXE_IP -p $3 -iters $IT $1 -t 280s"; }
pp_go1() { pair "pp-rxe-go1-$1" 300 "env GOMAXPROCS=1 kcheck pp-server -b $RXE_IP -p $2 -iters $IT -t 280s" "env GOMAXPROCS=1 kcheck pp-client -s $RXE_IP -p $2 -iters $IT -t 280s"; }
pp_base() {
	[ -x /extra/kcheck-base ] || return 0
	pair "pp-rxe-base-$1" 300 "kcheck-base pp-server -b $RXE_IP -p $2 -iters $IT -t 280s" "kcheck-base pp-client -s $RXE_IP -p $2 -iters $IT -t 280s"
}
rp_c() { pair "rping-rxe-c-$1" 300 "rping -s -a $RXE_IP -p $2 -C $PINGS" "rping -c -a $RXE_IP -p $2 -C $PINGS"; }
rp_go() { pair "rping-rxe-go-$1" 300 "env CMRT_FABRIC=kernel go-rping -s -a $RXE_IP -p $2 -C $PINGS" "env CMRT_FABRIC=kernel go-rping -c -a $RXE_IP -p $2 -C $PINGS"; }

# Warm-up, not reported: the first use of each device and program.
cm_c rxe warm $RXE_IP 7690
cm_go rxe warm $RXE_IP 7691
pp_go -e warm 7692

rep=1
while [ "$rep" -le "$R" ]; do
	p=$((7700 + 100 * rep))
	if [ $((rep % 2)) = 1 ]; then
		cm_c rxe $rep $RXE_IP $p; cm_go rxe $rep $RXE_IP $((p + 1))
		cm_c siw $rep $SIW_IP $((p + 2)); cm_go siw $rep $SIW_IP $((p + 3))
		pp_c -e $rep; pp_go -e $rep $((p + 4)); pp_c "" $rep; pp_go "" $rep $((p + 5))
		pp_go1 $rep $((p + 8)); pp_base $rep $((p + 9))
		rp_c $rep $((p + 6)); rp_go $rep $((p + 7))
	else
		cm_go rxe $rep $RXE_IP $((p + 1)); cm_c rxe $rep $RXE_IP $p
		cm_go siw $rep $SIW_IP $((p + 3)); cm_c siw $rep $SIW_IP $((p + 2))
		pp_base $rep $((p + 9)); pp_go1 $rep $((p + 8))
		pp_go -e $rep $((p + 4)); pp_c -e $rep; pp_go "" $rep $((p + 5)); pp_c "" $rep
		rp_go $rep $((p + 7)); rp_c $rep $((p + 6))
	fi
	rep=$((rep + 1))
done
summary
