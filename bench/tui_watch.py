"""Watching a long run with eight GPUs: the app's CPU, its memory over time, and the latency from
an event written to the run directory to it being on screen.

    .venv/bin/python bench/tui_watch.py [--duration 600 | --quick] [--every 60] [--json OUT]

A writer process plays supervisor and worker for a simulated run with eight GPUs (the recorded
figures of tests/data/fake_gpus8.json): every 0.5 s a resource sample (samples.jsonl) and a line of
train.log; a step event for each of the eight ranks (events.jsonl, one write) at intervals drawn
uniformly from 0.3..0.7 s (mean 0.5 s: 2 Hz, but not phase-locked to the app's 2 Hz poll, so the
latency figures cover every phase). It stamps each step number with the time it was written.

The real `fttui attach RUN_DIR` runs in a tmux pane (120x40, TERM=xterm-256color). The benchmark
polls `capture-pane -p` every 20 ms, reads the step number of the progress line, and for each
step first seen on screen records (time seen - time written): the latency. It samples the app
process's CPU time and RSS (psutil) when the first step is on screen and every --every seconds
after (CPU as % of one core over each interval).

--quick: 60 s, samples every 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FTTUI_BIN = Path(sys.executable).parent / "fttui"
FAKE_GPUS8 = ROOT / "tests" / "data" / "fake_gpus8.json"
RANKS = 8
PROGRESS = re.compile(r"progress .*?step (\d+)/(\d+)")


# ------------------------------------------------------------------------------------ writer
def _append(path: Path, objs: list[dict]) -> None:
    data = "".join(json.dumps(o) + "\n" for o in objs).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def make_run_dir(home: Path, duration: float) -> Path:
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-bench-watch8-" + uuid.uuid4().hex[:4]
    rd = home / "runs" / run_id
    rd.mkdir(parents=True, mode=0o700)
    profile = {"name": "bench-watch8", "method": "lora", "model": {"name_or_path": "Qwen/Qwen2.5-7B",
                                                                   "init": "pretrained"},
               "data": {"name": "alpaca", "max_seq_len": 2048},
               "train": {"batch_size": 4, "grad_accum": 4, "warmup_exclude_steps": 1, "precision": "bf16"},
               "devices": {"gpus": RANKS, "nodes": 1}, "limits": {}}
    (rd / "profile.json").write_text(json.dumps(profile))
    (rd / "events.jsonl").touch()
    (rd / "samples.jsonl").touch()
    (rd / "train.log").touch()
    return rd


def writer(rd: Path, duration: float, stamps: Path) -> None:
    """Plays the supervisor (samples, log) and eight worker ranks (step events) for `duration` s."""
    frames = json.loads(FAKE_GPUS8.read_text())
    gpu_frames = frames["frames"]
    total = int(duration / 0.5) + 100
    (rd / "supervisor.json").write_text(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0),
                                                    "started": time.time()}))
    t0 = time.time()
    ev, smp, log = rd / "events.jsonl", rd / "samples.jsonl", rd / "train.log"
    _append(ev, [{"event": "launch", "t": t0, "rank": -1, "source": "supervisor", "pid": os.getpid()}])
    _append(ev, [{"event": "start", "t": t0, "rank": r, "source": "worker", "total_steps": total,
                  "world_size": RANKS, "micro_batch": 4, "grad_accum": 4, "max_seq_len": 2048,
                  "num_samples": total * 128, "params_total": 7_615_616_512, "params_trainable": 20_185_088,
                  "env": {"gpu_names": ["NVIDIA H100 80GB HBM3"] * RANKS}} for r in range(RANKS)])
    rng = random.Random(1)
    step = 0
    next_step = t0 + rng.uniform(0.3, 0.7)
    next_sample = t0
    i = 0
    stamp_f = open(stamps, "a", buffering=1)
    end = t0 + duration
    while True:
        now = time.time()
        if now >= end:
            break
        if now >= next_sample:
            frame = gpu_frames[i % len(gpu_frames)]
            _append(smp, [{"t": now, "gpu": {"available": True, "reason": None, "driver": frames.get("driver"),
                                             "cuda": frames.get("cuda"), "gpus": frame},
                           "host": {"ram_used_mb": 200_000.0 + (i % 50), "ram_total_mb": 2_063_000.0,
                                    "swap_used_mb": 0.0, "swap_total_mb": 0.0, "tree_rss_mb": 48_000.0 + (i % 7),
                                    "tree_nprocs": 10, "tree_cpu_pct": 800.0}}])
            _append_text(log, f"[sample {i}] gpu mem {frame[0].get('mem_used_mb')} MB\n")
            i += 1
            next_sample += 0.5
        if now >= next_step:
            step += 1
            tt = now - t0
            t_w = time.time()
            _append(ev, [{"event": "step", "t": t_w, "rank": r, "source": "worker", "step": step,
                          "total_steps": total, "epoch": step / total, "samples": step * 16,
                          "tokens": step * 16 * 1800, "tokens_padded": step * 16 * 2048,
                          "loss": 2.0 / (1 + step / 200), "lr": 2e-4, "step_time": 0.5, "train_time": tt,
                          "torch_peak_alloc_mb": 60_000.0 + r, "torch_peak_reserved_mb": 64_000.0 + r,
                          "peak_rss_mb": 6000.0} for r in range(RANKS)])
            stamp_f.write(f"{step} {t_w}\n")
            next_step = now + rng.uniform(0.3, 0.7)
        time.sleep(max(0.0, min(next_sample, next_step) - time.time()))
    stamp_f.close()


def _append_text(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------ the app
class Pane:
    def __init__(self, width: int, height: int, env: dict) -> None:
        self.sock = f"fttui-bench-{uuid.uuid4().hex[:8]}"
        self.env = env
        self.size = (width, height)

    def _cmd(self, *args: str) -> list[str]:
        return ["tmux", "-L", self.sock, "-f", "/dev/null", *args]

    def start(self, argv: list[str]) -> int:
        w, h = self.size
        cmd = "exec " + " ".join(shlex.quote(a) for a in argv)
        subprocess.run(self._cmd("new-session", "-d", "-s", "w", "-x", str(w), "-y", str(h), "-c", str(ROOT),
                                 cmd), env=self.env, check=True)
        out = subprocess.run(self._cmd("display-message", "-p", "-t", "w", "#{pane_pid}"), env=self.env,
                             capture_output=True, text=True, check=True)
        return int(out.stdout.strip())

    def capture(self) -> str:
        return subprocess.run(self._cmd("capture-pane", "-p", "-t", "w"), env=self.env, capture_output=True,
                              text=True).stdout

    def close(self) -> None:
        subprocess.run(self._cmd("kill-server"), env=self.env, capture_output=True)
        _tmux_socket_path(self.sock).unlink(missing_ok=True)


def _tmux_socket_path(name: str) -> Path:
    return Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / name


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=600.0, help="simulated run length in seconds (600)")
    ap.add_argument("--quick", action="store_true", help="60 s, resource samples every 10 s")
    ap.add_argument("--every", type=float, default=None, help="seconds between CPU/RSS samples (60; quick: 10)")
    ap.add_argument("--json", metavar="OUT", help="also write the figures as JSON to this file")
    ap.add_argument("--writer", nargs=3, metavar=("RUN_DIR", "DURATION", "STAMPS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writer:
        writer(Path(args.writer[0]), float(args.writer[1]), Path(args.writer[2]))
        return 0
    import psutil

    if shutil.which("tmux") is None or not FTTUI_BIN.exists():
        print("needs tmux and the fttui entry point next to this Python", file=sys.stderr)
        return 2
    duration = 60.0 if args.quick else args.duration
    every = args.every or (10.0 if args.quick else 60.0)
    home = Path(tempfile.mkdtemp(prefix="fttui-bench-watch-"))
    rd = make_run_dir(home, duration)
    stamps = home / "stamps.txt"
    stamps.touch()
    env = dict(os.environ)
    env.pop("FTTUI_NO_APP", None)
    env.pop("NO_COLOR", None)
    env.pop("TMUX", None)
    env.update(FTTUI_HOME=str(home), TERM="xterm-256color", FTTUI_FAKE_GPUS=str(FAKE_GPUS8))
    wproc = subprocess.Popen([sys.executable, __file__, "--writer", str(rd), str(duration + 5), str(stamps)],
                             env=env, start_new_session=True)
    pane = Pane(120, 40, env)
    result: dict = {}
    try:
        while not (rd / "supervisor.json").exists():
            time.sleep(0.05)
        app_pid = pane.start([str(FTTUI_BIN), "attach", str(rd)])
        app = psutil.Process(app_pid)
        t_start = time.monotonic()
        seen: dict[int, float] = {}
        res_samples: list[dict] = []
        cpu_prev = t_prev = None
        next_res = None
        last_step = 0
        while time.monotonic() - t_start < duration:
            s = pane.capture()
            now = time.time()
            m = PROGRESS.search(s)
            if m:
                n = int(m.group(1))
                if n > last_step:
                    for k in range(last_step + 1, n + 1):
                        seen.setdefault(k, now)
                    last_step = n
            tm = time.monotonic()
            if next_res is None and seen:  # the first frame with a step: the start sample
                cpu_prev, t_prev, next_res = app.cpu_times(), tm, tm + every
                res_samples.append({"t_s": round(tm - t_start, 1),
                                    "rss_mb": round(app.memory_info().rss / 2**20, 1), "cpu_pct": None})
            elif next_res is not None and tm >= next_res:
                ct = app.cpu_times()
                busy = (ct.user + ct.system) - (cpu_prev.user + cpu_prev.system)
                res_samples.append({"t_s": round(tm - t_start, 1), "rss_mb": round(app.memory_info().rss / 2**20, 1),
                                    "cpu_pct": round(100 * busy / (tm - t_prev), 1)})
                cpu_prev, t_prev = ct, tm
                next_res += every
            time.sleep(0.02)
        written = {}
        for line in stamps.read_text().splitlines():
            k, t = line.split()
            written[int(k)] = float(t)
        # a step is "shown" when its number (or a later one) is first on screen; steps overtaken
        # within one poll count with the time the later one appeared
        # steps written before the app's first frame measure its start, not the watching: left out
        first = min(seen) if seen else 0
        lat = [seen[k] - written[k] for k in sorted(seen) if k in written and k > first]
        lat_direct = [seen[k] - written[k] for k in sorted(seen) if k in written and k > first
                      and (k + 1 not in seen or seen[k + 1] > seen[k])]
        ct = app.cpu_times()
        steady = [r["cpu_pct"] for r in res_samples if r["cpu_pct"] is not None]
        result = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
                       f"Python {platform.python_version()}",
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
            "duration_s": duration, "gpus": RANKS, "terminal": "tmux 120x40",
            "steps_written": len(written), "steps_seen": len(seen),
            "latency_s": {"n": len(lat), "p50": round(pct(lat, 0.5), 3), "p95": round(pct(lat, 0.95), 3),
                          "max": round(max(lat), 3) if lat else None,
                          "mean": round(statistics.mean(lat), 3) if lat else None},
            "latency_last_step_of_poll_s": {"n": len(lat_direct), "p50": round(pct(lat_direct, 0.5), 3),
                                            "p95": round(pct(lat_direct, 0.95), 3)},
            "cpu_s_total_incl_start": round(ct.user + ct.system, 2),
            "cpu_pct_of_one_core_after_first_frame": round(statistics.mean(steady), 1) if steady else None,
            "resources": res_samples,
            "events_jsonl_mb": round((rd / "events.jsonl").stat().st_size / 2**20, 2),
            "samples_jsonl_mb": round((rd / "samples.jsonl").stat().st_size / 2**20, 2),
        }
    finally:
        pane.close()
        wproc.kill()
        wproc.wait()
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
