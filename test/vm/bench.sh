# bench.sh - connection set-up timing in the test VM, every tool in the
# same boot with the same connection count: rdma-core's cmtime (real QPs) on
# siw0 and on rxe0, cmrt's Go cmtime on the software fabric at siw0's
# address (iWARP over TCP, QPs included), and on the kernel fabric over
# rxe0 (QP-less: the "simulated QPs" test, with init/rtr/rts as
# rdma_init_qp_attr calls), and, as the floor under all of them, Go
# cmtime's socket baseline (-S: a bare TCP handshake per connection, no
# data; rdma-core 44's cmtime has no -S) at siw0's address. Repeated BENCH_VM_REPS times, the order of the
# Go and C runs alternating, on fresh ports each time. Needs go-cmtime
# (examples/cmtime, static) in /extra. Run by scripts/bench.sh --vm.
#
# siw fails past 71 QPs per process, so N stays below that (default 50).
. /tests/lib.sh
N=${BENCH_VM_N:-50}
R=${BENCH_VM_REPS:-3}
export PAIR_DELAY=${PAIR_DELAY:-1}
echo "BENCH_VM_N=$N BENCH_VM_REPS=$R"
grep -m1 'model name' /proc/cpuinfo
echo "vCPUs: $(grep -c ^processor /proc/cpuinfo)"

c_siw() { PERSIST=1 pair "vm-rdmacore-siw-$1" 120 "cmtime -b $SIW_IP -p $2 -c $N" "cmtime -s $SIW_IP -p $2 -c $N"; }
c_rxe() { PERSIST=1 pair "vm-rdmacore-rxe-$1" 120 "cmtime -b $RXE_IP -p $2 -c $N" "cmtime -s $RXE_IP -p $2 -c $N"; }
go_soft() { pair "vm-gosoft-siw-$1" 120 "go-cmtime -b $SIW_IP -p $2 -c $N" "go-cmtime -s $SIW_IP -p $2 -c $N"; }
go_sock() { pair "vm-gosock-siw-$1" 120 "go-cmtime -S -b $SIW_IP -p $2 -c $N" "go-cmtime -S -s $SIW_IP -p $2 -c $N"; }
go_kernel() {
	pair "vm-gokernel-rxe-$1" 120 "env CMRT_FABRIC=kernel go-cmtime -b $RXE_IP -p $2 -c $N" \
		"env CMRT_FABRIC=kernel go-cmtime -s $RXE_IP -p $2 -c $N"
}

# Warm-up, not reported: the first use of each device and program.
PERSIST=1 pair warmup-rdmacore-siw 60 "cmtime -b $SIW_IP -p 7590 -c 5" "cmtime -s $SIW_IP -p 7590 -c 5"
PERSIST=1 pair warmup-rdmacore-rxe 60 "cmtime -b $RXE_IP -p 7592 -c 5" "cmtime -s $RXE_IP -p 7592 -c 5"
pair warmup-gosoft-siw 60 "go-cmtime -b $SIW_IP -p 7594 -c 5" "go-cmtime -s $SIW_IP -p 7594 -c 5"
pair warmup-gosock-siw 60 "go-cmtime -S -b $SIW_IP -p 7598 -c 5" "go-cmtime -S -s $SIW_IP -p 7598 -c 5"
pair warmup-gokernel-rxe 60 "env CMRT_FABRIC=kernel go-cmtime -b $RXE_IP -p 7596 -c 5" \
	"env CMRT_FABRIC=kernel go-cmtime -s $RXE_IP -p 7596 -c 5"

rep=1
while [ "$rep" -le "$R" ]; do
	p=$((7600 + 100 * rep))
	if [ $((rep % 2)) = 1 ]; then
		c_siw "$rep" "$p"; go_soft "$rep" $((p + 10)); go_sock "$rep" $((p + 40))
		c_rxe "$rep" $((p + 20)); go_kernel "$rep" $((p + 30))
	else
		go_sock "$rep" $((p + 40)); go_soft "$rep" $((p + 10)); c_siw "$rep" "$p"
		go_kernel "$rep" $((p + 30)); c_rxe "$rep" $((p + 20))
	fi
	rep=$((rep + 1))
done
summary
