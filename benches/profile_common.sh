# Shared by benches/profile.sh and benches/profile_handoff.sh (sourced after
# `port` is set): the redis-server's client, its CPU, a temporary directory,
# and the commands a run sends under `redis-cli monitor`.
cli() { redis-cli -p "$port" "$@"; }
redis_cpu() { cli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Runs the command after DIVISOR under `redis-cli monitor` and writes to
# $tmp/shape, per command name, the calls the client sent ("[0
# 127.0.0.1:...]": `<name> sent <calls / DIVISOR>`) and those its scripts
# ran ("[0 lua]": `<name> script <calls / DIVISOR>`).
monitor_shape() {
    local per=$1
    shift
    redis-cli -p "$port" monitor >"$tmp/monitor" &
    local mon=$!
    sleep 0.2
    "$@"
    sleep 0.2
    kill "$mon"
    wait "$mon" 2>/dev/null || true
    awk -v per="$per" '$3 ~ /^127\.0\.0\.1:/ || $3 == "lua]" {
            gsub(/"/, "", $4); c = tolower($4)
            if ($3 == "lua]") lua[c]++; else top[c]++
        }
        END { for (c in top) print c, "sent", top[c] / per; for (c in lua) print c, "script", lua[c] / per }
    ' "$tmp/monitor" >"$tmp/shape"
}
