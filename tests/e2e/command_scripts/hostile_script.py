"""A command for the fault and hostile-input tests (issue 28); what it does is chosen by MODE.

secrets: prints a secret in every shape fttui masks, a line over 128 KiB holding one across the
log writer's read size, then fails with a secret in its exception message.
daemon: double-forks a `setsid` daemon (its pid written to DAEMON_PID) and, with HOLD=1, stays.
flood: writes FLOOD_MB of output as fast as it can (a SIGTERM meanwhile waits), then writes
DONE_FILE and waits for SIGTERM.
"""

import os
import sys
import time

mode = os.environ.get("MODE", "secrets")
if mode == "secrets":
    s = os.environ["SECRET"]
    print(f"using {os.environ['MY_API_KEY']} from the environment", flush=True)
    print(f"connecting with password={s}", flush=True)
    print(f"curl -H 'Authorization: Bearer {s}'", flush=True)
    print(f"token hf_{'A' * 34} was given", flush=True)
    sys.stdout.write("x" * (128 * 1024 + 65536 - 20) + f" password={s} " + "y" * (64 * 1024) + "\n")
    sys.stdout.flush()
    raise RuntimeError(f"login failed: password={s}")
if mode == "daemon":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(os.environ["DAEMON_PID"] + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(os.environ["DAEMON_PID"] + ".tmp", os.environ["DAEMON_PID"])
            os.closerange(0, 3)
            while True:
                time.sleep(1)
        os._exit(0)
    os.wait()
    while not os.path.exists(os.environ["DAEMON_PID"]):
        time.sleep(0.05)
    print("daemon started", flush=True)
    while os.environ.get("HOLD") == "1":
        time.sleep(1)
    sys.exit(0)
if mode == "flood":
    import signal

    # SIGTERM (the run stopped on the full disk) waits for the output's end: a write blocked on
    # fttui's pipe would never end (SIGKILL after the grace then, and no DONE_FILE)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    line = ("z" * 1023 + "\n").encode()
    for _ in range(int(os.environ.get("FLOOD_MB", "8")) * 1024):
        os.write(1, line)
    with open(os.environ["DONE_FILE"], "w") as f:
        f.write("done")
    deadline = time.monotonic() + 600
    while not stop and time.monotonic() < deadline:
        time.sleep(0.1)
    sys.exit(0)
if mode == "steps":  # a few steps written as fttui's events, then a step that never returns
    import json

    path = os.path.join(os.environ["FTTUI_RUN_DIR"], "events.jsonl")
    for step in range(1, 6):
        time.sleep(0.1)
        line = json.dumps({"event": "step", "t": time.time(), "rank": 0, "source": "worker", "step": step,
                           "total_steps": 100, "samples": step, "tokens": step * 8, "train_time": step * 0.1})
        with open(path, "a") as f:
            f.write(line + "\n")
    time.sleep(600)
