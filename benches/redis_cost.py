#!/usr/bin/env python3
"""Redis's own cost of one call, in instructions of redis-server.

Usage: benches/redis_cost.py LUA_DIR [PORT] [CASE ...]

LUA_DIR is the runtime's generated scripts, `$OUT_DIR/lua` of the
lockattr-runtime build (`ls -td target/*/build/lockattr-runtime-*/out/lua |
head -1`). Each case starts `redis-server` under `valgrind --tool=callgrind`
on a free loopback port (PORT and PORT + 1, default 7600), sends its
commands 1,000 times and, on a second server, 3,000 times, in one
`redis-cli --pipe` stream, and prints (Ir(3000) - Ir(1000)) / 2000: the
instructions of one round of the case, without the server's start-up and
shut-down. Instruction counts do not depend on the load of the machine, so
runs are comparable; valgrind makes them slow (about 20 s a case).

The `-fcall` cases send the same calls as FCALL of the runtime's Functions
library (`library.lua` in LUA_DIR, loaded with FUNCTION LOAD first), as the
runtime does on Redis 7 and later; the others send EVALSHA, as it does on
a server that refuses Functions.
"""
import hashlib
import os
import re
import subprocess
import sys
import time


def resp(words):
    out = f"*{len(words)}\r\n"
    for word in words:
        out += f"${len(word.encode())}\r\n{word}\r\n"
    return out


def sha(source):
    return hashlib.sha1(source.encode()).hexdigest()


def cli(port, *words):
    return subprocess.run(["redis-cli", "-p", str(port), *words], capture_output=True, text=True).stdout


def instructions(setup, commands, rounds, port):
    out = f"/tmp/redis_cost.{port}.callgrind"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            time.sleep(0.2)
            if cli(port, "PING").strip() == "PONG":
                break
        for words in setup:
            cli(port, *words)
        stream = "".join(resp(c) for _ in range(rounds) for c in commands)
        subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=stream, capture_output=True, text=True)
        cli(port, "SHUTDOWN", "NOSAVE")
        server.wait(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    total = int(re.search(r"^(?:summary|totals): (\d+)", open(out).read(), re.M).group(1))
    os.remove(out)
    return total


def cases(lua_dir):
    acquire = open(os.path.join(lua_dir, "acquire.lua")).read()
    release = open(os.path.join(lua_dir, "release.lua")).read()
    unlock = "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) end return 0"
    empty = "return 1"
    get1 = "return redis.call('get', KEYS[1])"
    # The acquire script's shared helpers alone, then with its arguments read
    # (as its fast path reads them, up to its first Redis call).
    body = acquire.index("-- ACQUIRE:")
    helpers = acquire[:body] + "\nreturn 1\n"
    checks = acquire[:acquire.index("\nlocal fence, counter\n", body)] + "\nreturn 1\n"
    # The same three writes as the free-lock path, without helpers or checks.
    bare = ("local fence = (tonumber(redis.call('get', KEYS[2])) or 0) + 1\n"
            "if redis.call('set', KEYS[1], ARGV[1] .. '\\n' .. string.format('%d', fence), 'NX', 'PX', 10000) then\n"
            "  redis.call('set', KEYS[2], string.format('%d', fence), 'PX', 70000)\n"
            "  return {1, fence}\nend\nreturn {0, 0}\n")
    library = "#!lua name=cost\nredis.register_function('e', function(keys, args) return 1 end)"
    # The runtime's library, and its functions' names: `<library>_<script>`.
    runtime_library = open(os.path.join(lua_dir, "library.lua")).read()
    prefix = runtime_library.split("\n", 1)[0].removeprefix("#!lua name=")
    load_library = [["FUNCTION", "LOAD", runtime_library]]
    four = ["4", "l", "f", "q", "w"]
    acq_args = ["tok", "10000:60000:0:1700000000000:h\n1\nl", "0"]
    rel_args = ["tok", "0:60000:0:0:0:ch"]

    def evalsha(source, keys, args):
        return ["EVALSHA", sha(source), *keys, *args]

    def fcall(script, keys, args):
        return ["FCALL", f"{prefix}_{script}", *keys, *args]

    def load(*sources):
        return [["SCRIPT", "LOAD", s] for s in sources]

    return {
        "ping": ([], [["PING"]]),
        "get": ([], [["GET", "a"]]),
        "del": ([], [["DEL", "l"]]),
        "set-nx-px+del": ([], [["SET", "l", "x", "NX", "PX", "10000"], ["DEL", "l"]]),
        "evalsha-empty-0-keys": (load(empty), [evalsha(empty, ["0"], [])]),
        "evalsha-empty-1-key": (load(empty), [evalsha(empty, ["1", "a"], [])]),
        "evalsha-empty-4-keys-3-args": (load(empty), [evalsha(empty, four, acq_args)]),
        "fcall-empty-0-keys": ([["FUNCTION", "LOAD", library]], [["FCALL", "e", "0"]]),
        "fcall-empty-4-keys-3-args": ([["FUNCTION", "LOAD", library]], [["FCALL", "e", *four, *acq_args]]),
        "evalsha-get-1-key": (load(get1), [evalsha(get1, ["1", "a"], [])]),
        "acquire-helpers-only+del": (load(helpers), [evalsha(helpers, four, acq_args), ["DEL", "l"]]),
        "acquire-helpers-and-checks+del": (load(checks), [evalsha(checks, four, acq_args), ["DEL", "l"]]),
        "bare-acquire+del": (load(bare), [evalsha(bare, four, acq_args), ["DEL", "l"]]),
        "acquire+del": (load(acquire), [evalsha(acquire, four, acq_args), ["DEL", "l"]]),
        "lockattr-pair": (load(acquire, release),
                          [evalsha(acquire, four, acq_args), evalsha(release, four, rel_args)]),
        "acquire+del-fcall": (load_library, [fcall("acquire", four, acq_args), ["DEL", "l"]]),
        "lockattr-pair-fcall": (load_library,
                                [fcall("acquire", four, acq_args), fcall("release", four, rel_args)]),
        "rslock-pair": (load(unlock), [["SET", "l", "tok", "NX", "PX", "10000"], evalsha(unlock, ["1", "l"], ["tok"])]),
    }


def main():
    lua_dir = sys.argv[1]
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 7600
    table = cases(lua_dir)
    for name in sys.argv[3:] or table:
        setup, commands = table[name]
        few = instructions(setup, commands, 1000, port)
        many = instructions(setup, commands, 3000, port + 1)
        print(f"{name}\t{(many - few) // 2000}", flush=True)


if __name__ == "__main__":
    main()
