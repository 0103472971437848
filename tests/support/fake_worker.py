#!/usr/bin/env python3
"""A cudaperf sandbox worker that misbehaves on purpose (tests/failure_injection.rs).

Started by a pool as `fake_worker.py __cudaperf_worker <role>`; the behaviour comes from the
environment:

  FAKE_MODE     how to misbehave (see MODES below)
  FAKE_REAL     the real worker program, for the modes that forward jobs to one
  FAKE_STATE    a file used to remember across processes (crash_once)
  FAKE_REPLY    a JSON result to answer every job with (reply; a `gpu` job gets one copy
                per member of its group)

The protocol (src/sandbox/protocol.rs): one greeting line, then one response line per request
line: {"id": N, "restart": false, "result": ...} or {"id": N, "error": "..."}.
"""
import json
import os
import subprocess
import sys
import time

PROTOCOL = 2


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def greet(role, protocol=PROTOCOL):
    out({"hello": {"protocol": protocol, "role": role, "version": "0.1.0", "pid": os.getpid()}})


def requests():
    for line in iter(sys.stdin.readline, ""):
        if line.strip():
            yield json.loads(line)


def forward(role):
    """A real worker behind us: greet for it, relay requests and responses."""
    real = subprocess.Popen(
        [os.environ["FAKE_REAL"], "__cudaperf_worker", role],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    hello = real.stdout.readline()
    sys.stdout.write(hello)
    sys.stdout.flush()
    return real


def relay(real, req):
    real.stdin.write(json.dumps(req) + "\n")
    real.stdin.flush()
    sys.stdout.write(real.stdout.readline())
    sys.stdout.flush()


def main():
    role = sys.argv[2] if len(sys.argv) > 2 else ""
    mode = os.environ.get("FAKE_MODE", "")
    if mode == "garbage":
        print("Segmentation fault (core dumped)", flush=True)
        time.sleep(5)
        return 0
    if mode == "wrong_protocol":
        greet(role, protocol=PROTOCOL - 1)
    elif mode == "wrong_role":
        greet("diag")
    elif mode == "silent":
        time.sleep(60)
        return 0
    elif mode == "exit_before_greeting":
        sys.stderr.write("fake worker: cannot load libsomething.so\n")
        return 3
    elif mode in ("crash_always", "hang_always"):
        greet(role)
        for _ in requests():
            if mode == "crash_always":
                os._exit(9)
            time.sleep(3600)
    elif mode == "crash_once":
        state = os.environ["FAKE_STATE"]
        if not os.path.exists(state):
            open(state, "w").close()
            greet(role)
            for _ in requests():
                os._exit(9)
            return 0
        os.execv(os.environ["FAKE_REAL"], [os.environ["FAKE_REAL"], "__cudaperf_worker", role])
    elif mode in ("crash_on_marker", "hang_on_marker"):
        # The candidate's own doing: only sources with the marker kill or hang the compiler.
        real = forward(role)
        for req in requests():
            if "CUDAPERF_FAKE_MARKER" in json.dumps(req):
                if mode == "crash_on_marker":
                    os._exit(9)
                time.sleep(3600)
            relay(real, req)
    elif mode == "reply":
        greet(role)
        reply = json.loads(os.environ["FAKE_REPLY"])
        for req in requests():
            result = reply
            if role == "gpu" and isinstance(reply, dict):
                # A GPU job is a group: one result per member, in order.
                result = [reply] * len(req["job"].get("candidates", [None]))
            out({"id": req["id"], "restart": False, "result": result})
    else:
        sys.stderr.write("fake worker: unknown FAKE_MODE %r\n" % mode)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
