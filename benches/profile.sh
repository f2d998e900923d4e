#!/usr/bin/env bash
# Where the time goes (benches/README.md): runs the profiling driver
# (benches/profile.rs) twice against a redis-server of your own and prints,
# per pair (the N timed pairs plus the driver's 100 warm-up pairs):
#  - run 1, under `perf stat`: the client's CPU (task-clock), its context
#    switches and CPU migrations, the wake-ups it caused (sched:sched_waking in
#    its threads), and Redis's side: its CPU (INFO cpu, used_cpu_user +
#    used_cpu_sys) and, per command, calls and usec (INFO commandstats, after
#    a CONFIG RESETSTAT; INFO and CONFIG left out);
#  - run 2, under `perf record -a -e sched:sched_waking`: the wake-ups of the
#    client's threads and of redis-server's main thread (sched_waking: the
#    tracepoint in the waker's context; sched_wakeup, in the target's, missed
#    about half of them here);
#  - run 3, 200 pairs under `redis-cli monitor`: the commands the client sent
#    (its round trips) and those its scripts ran, by name. commandstats counts
#    both, and a script's usec includes those of the commands it runs, so
#    the Redis usec per pair is the sum over the commands the client sent.
# Needs root (or perf_event_paranoid <= -1) for the system-wide tracepoint.
#
# usage: benches/profile.sh BIN PORT LIB SHAPE N
#   BIN: the driver (`cargo bench --bench profile --no-run` prints its path)
#   PORT: a redis-server on 127.0.0.1 (never 6379), e.g. one started with
#         redis-server --port 7455 --save '' --appendonly no --daemonize yes
#   LIB SHAPE N: as for the driver (lockattr|rslock|ping, runtime shape, pairs)
set -euo pipefail
bin=$1 port=$2 lib=$3 shape=$4 n=$5
per=$((n + 100))
url="redis://127.0.0.1:$port/"
. "$(dirname "$0")/profile_common.sh"

# Run 3 first: which commands are sent by the client ("[0 127.0.0.1:...]")
# and which are run by its scripts ("[0 lua]"), per pair.
quiet() { "$@" >/dev/null; }
monitor_shape 300 quiet "$bin" "$url" "$lib" "$shape" 200
echo "round trips (MONITOR, 200 + 100 pairs):"
sort "$tmp/shape" | awk '{ printf "  %-16s %-6s %.3f /pair\n", $1, $2, $3 }'

cli config resetstat >/dev/null
c0=$(redis_cpu)
perf stat -x, -o "$tmp/stat" -e task-clock,context-switches,cpu-migrations,sched:sched_waking \
    -- "$bin" "$url" "$lib" "$shape" "$n"
c1=$(redis_cpu)
cli info commandstats | tr -d '\r' >"$tmp/cmd"
awk -F, -v per="$per" '
    $3 == "task-clock" { printf "client CPU %.2f µs/pair\n", $1 * 1000 / per }
    $3 == "context-switches" { printf "context switches %.3f /pair\n", $1 / per }
    $3 == "cpu-migrations" { printf "cpu migrations %.4f /pair\n", $1 / per }
    $3 == "sched:sched_waking" { printf "wake-ups caused by the client %.3f /pair\n", $1 / per }
' "$tmp/stat"
awk -v d="$(echo "$c1 - $c0" | bc -l)" -v per="$per" \
    'BEGIN { printf "redis-server CPU (INFO cpu) %.2f µs/pair\n", d * 1e6 / per }'
awk -F'[:,=]' -v per="$per" '
    FILENAME == ARGV[2] { sent[$1] += ($2 == "sent") ? $3 : 0; any[$1] += $3; next }
    /^cmdstat_/ && $1 !~ /^cmdstat_(info|config)/ {
        sub(/^cmdstat_/, "", $1)
        # The share of its calls that the client sent (the rest: run by scripts).
        share = ($1 in any && any[$1] > 0) ? sent[$1] / any[$1] : 1
        printf "  %-16s %.3f calls/pair  %.2f usec/call  %.2f usec/pair  (sent by the client: %.0f%%)\n", $1, $3 / per, $5 / $3, $5 / per, share * 100
        calls += $3 * share; usec += $5 * share
    }
    END { printf "redis commands sent %.3f /pair, their usec (scripts include theirs) %.2f /pair\n", calls / per, usec / per }
' FS=' ' "$tmp/shape" FS='[:,=]' "$tmp/cmd"

perf record -q -a -e sched:sched_waking -o "$tmp/wake.data" -- "$bin" "$url" "$lib" "$shape" "$n" >/dev/null
redis_pid=$(cli info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
comm=$(basename "$bin" | cut -c1-15)
perf script -i "$tmp/wake.data" --show-task-events -F comm,pid,tid,trace 2>/dev/null | awk -v comm="$comm" -v rpid="$redis_pid" -v per="$per" '
    # The driver: the pid that exec-ed under its name; its threads: the forks of that pid.
    /PERF_RECORD_COMM exec:/ && index($0, "exec: " comm ":") { split($NF, a, "[:/]"); pid = a[2]; tids[pid] = 1 }
    /PERF_RECORD_FORK\(/ && pid != "" { if (match($0, /FORK\([0-9]+:[0-9]+\)/)) { split(substr($0, RSTART + 5, RLENGTH - 6), f, ":"); if (f[1] == pid) tids[f[2]] = 1 } }
    /sched:sched_waking|prio=/ && match($0, / pid=[0-9]+/) {
        t = substr($0, RSTART + 5, RLENGTH - 5)
        if (t in tids) client++
        if (t == rpid) server++
    }
    END { printf "wake-ups of the client threads %.3f /pair, of redis-server %.3f /pair\n", client / per, server / per }
'
