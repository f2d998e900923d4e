#!/usr/bin/env bash
# Where the time goes, hand-over (benches/README.md): runs the two processes
# of row 3 (the bench binary re-executed with LOCKATTR_BENCH_ROLE=handoff,
# exactly as the bench starts them) against a redis-server of your own, one
# library, ROUNDS hand-overs, each process under `perf stat`, and prints per
# hand-over round: both processes' CPU, context switches and the wake-ups
# they caused, Redis's CPU (INFO cpu), and per command the calls and usec
# (INFO commandstats), split into those the processes sent and those their
# scripts ran (from a `redis-cli monitor` over a run of 20 rounds). The
# figures include the bench's signalling per round (RPUSH of the go and of
# t0, BLPOP of both, RPUSH of the result) and the holder's 25 ms sleep.
#
# usage: benches/profile_handoff.sh BENCH_BIN PORT LIB ROUNDS
#   BENCH_BIN: `cargo bench --bench lockattr --no-run` prints its path
#   LIB: lockattr | rslock (rslock's waiter retries up to 100 times, a random
#        0..200 ms sleep between tries, as in the bench)
set -euo pipefail
bin=$1 port=$2 lib=$3 rounds=$4
url="redis://127.0.0.1:$port/"
. "$(dirname "$0")/profile_common.sh"

# Both processes of one run; $1: rounds, $2: a command to wrap each in.
pair_run() {
    cli del bench:handoff:go bench:handoff:t0 bench:handoff:results bench:handoff:idle >/dev/null
    local pids=() idx
    for idx in 0 1; do
        LOCKATTR_BENCH_ROLE=handoff LOCKATTR_BENCH_URL="$url" \
            LOCKATTR_BENCH_PARAMS="idx=$idx;rounds=$1;warmup=0;block=$1;ping=0;deploy=single|$url;sides=$lib" \
            $2 "$idx" "$bin" &
        pids+=($!)
    done
    wait "${pids[0]}" "${pids[1]}"
}
plain() { shift; "$@"; }
stat() {
    local idx=$1
    shift
    perf stat -x, -o "$tmp/stat$idx" -e task-clock,context-switches,cpu-migrations,sched:sched_waking -- "$@"
}

monitor_shape 20 pair_run 20 plain

cli config resetstat >/dev/null
c0=$(redis_cpu)
pair_run "$rounds" stat
c1=$(redis_cpu)
cli info commandstats | tr -d '\r' >"$tmp/cmd"
cli lrange bench:handoff:results 0 -1 | awk -F, '{ print $3 / 1000 }' | sort -n |
    awk '{ v[NR] = $1 } END { printf "hand-over p50 %.0f µs (%d rounds)\n", v[int((NR + 1) / 2)], NR }'
cat "$tmp/stat0" "$tmp/stat1" | awk -F, -v per="$rounds" '
    $3 == "task-clock" { cpu += $1 }
    $3 == "context-switches" { cs += $1 }
    $3 == "cpu-migrations" { mig += $1 }
    $3 == "sched:sched_waking" { wk += $1 }
    END {
        printf "both processes: CPU %.1f µs/round, context switches %.2f /round, migrations %.3f /round, wake-ups caused %.2f /round\n", cpu * 1000 / per, cs / per, mig / per, wk / per
    }'
awk -v d="$(echo "$c1 - $c0" | bc -l)" -v per="$rounds" \
    'BEGIN { printf "redis-server CPU (INFO cpu) %.1f µs/round\n", d * 1e6 / per }'
awk -v per="$rounds" '
    FILENAME == ARGV[2] { sent[$1] += ($2 == "sent") ? $3 : 0; any[$1] += $3; next }
    /^cmdstat_/ && $1 !~ /^cmdstat_(info|config|del|lrange)/ {
        sub(/^cmdstat_/, "", $1)
        share = ($1 in any && any[$1] > 0) ? sent[$1] / any[$1] : 1
        printf "  %-16s %.3f calls/round  %.2f usec/call  %.2f usec/round  (sent: %.0f%%)\n", $1, $3 / per, $5 / $3, $5 / per, share * 100
        calls += $3 * share; usec += $5 * share
        if ($1 ~ /^(rpush|blpop)$/) { scalls += $3 * share; susec += $5 * share }
    }
    END {
        printf "commands sent %.2f /round (of them the signalling RPUSH + BLPOP: %.2f), their usec %.2f /round (signalling: %.2f)\n", calls / per, scalls / per, usec / per, susec / per
    }
' FS=' ' "$tmp/shape" FS='[:,=]' "$tmp/cmd"
