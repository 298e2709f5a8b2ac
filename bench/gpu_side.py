"""Side readings of a GPU verification (bench/gpu_verify.sh; needs an NVIDIA card, not run by CI).

    python bench/gpu_side.py sample CSV        # NVML every 0.5 s until killed
    python bench/gpu_side.py report DIR        # DIR/rows.json + the logs -> Markdown on stdout

``sample`` writes, per card and sample, what NVML itself says, independent of fttui's sampler:
device memory used (v2 call, as nvidia-smi shows it, and the v1 call), every process's memory
(``pid:MiB`` list), utilisation, SM clock and its maximum, power and the enforced power limit,
temperature, and the clock-event ("throttle") reasons as a bit mask and by name.

``report`` puts each run's memory figures side by side (issue 25, "one memory picture"): the
row's NVML figures (device used, the run's own processes) and torch's reserved / allocated peaks,
against the peaks that nvidia-smi (``smi_gpu.csv``, ``smi_apps.csv``) and the raw NVML sampler
(``nvml_side.csv``) saw over the run's wall-clock window; and the throttle reasons seen in it.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from datetime import datetime

REASONS = [  # (bit, name): nvmlClocksEventReason* / nvmlClocksThrottleReason*
    (0x1, "gpu_idle"), (0x2, "applications_clocks"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"), (0x80, "hw_power_brake"),
    (0x100, "display_clock"),
]


def reason_names(mask: int | None) -> str:
    if mask is None:
        return ""
    names = [n for bit, n in REASONS if mask & bit]
    return "+".join(names) if names else "none"


def _try(fn, *a, **k):
    try:
        return fn(*a, **k)
    except Exception:  # noqa: BLE001 - a reading NVML cannot give is empty
        return None


def sample(path: str) -> None:
    import pynvml as nv

    nv.nvmlInit()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    cols = ["t", "index", "used_v2_mib", "used_v1_mib", "procs", "util_pct", "sm_mhz", "sm_max_mhz", "power_w",
            "power_limit_w", "temp_c", "reasons_mask", "reasons"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        while True:
            t = time.time()
            for i, h in enumerate(handles):
                v2 = _try(nv.nvmlDeviceGetMemoryInfo, h, version=nv.nvmlMemory_v2)
                v1 = _try(nv.nvmlDeviceGetMemoryInfo, h)
                procs = _try(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
                util = _try(nv.nvmlDeviceGetUtilizationRates, h)
                power = _try(nv.nvmlDeviceGetPowerUsage, h)
                limit = _try(nv.nvmlDeviceGetEnforcedPowerLimit, h)
                mask = _try(reasons_fn, h)
                w.writerow([
                    f"{t:.2f}", i, v2 and round(v2.used / 2**20), v1 and round(v1.used / 2**20),
                    ";".join(f"{p.pid}:{round((p.usedGpuMemory or 0) / 2**20)}" for p in procs),
                    util and util.gpu, _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                    _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM), power and power / 1000,
                    limit and limit / 1000, _try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                    mask, reason_names(mask)])
            f.flush()
            time.sleep(max(0.0, 0.5 - (time.time() - t)))


def _when(v) -> float | None:
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        pass
    try:
        d = datetime.fromisoformat(str(v))
        return d.timestamp()
    except ValueError:
        return None


def _read(path: str) -> list[list[str]]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [r for r in csv.reader(f) if r]


def _smi_time(s: str) -> float | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(s.strip(), fmt).timestamp()
        except ValueError:
            continue
    return _when(s)


def _first(v):
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    return (v[0] if v else None) if isinstance(v, list) else v


def fttui_reasons(d: str, row: dict) -> str:
    """The clock-event reasons fttui's own sampler recorded for the run (its samples.jsonl, every
    card of every sample), with how many samples carried each: to set beside the raw reader's."""
    run_id = row.get("run_id") or row.get("id")
    path = os.path.join(d, "home", "runs", str(run_id), "samples.jsonl")
    if not run_id or not os.path.exists(path):
        return "(no samples.jsonl)"
    seen: dict[str, int] = {}
    n = 0
    for line in open(path, errors="replace"):
        try:
            s = json.loads(line)
        except ValueError:
            continue
        gpus = (s.get("gpu") or {}).get("gpus") if isinstance(s, dict) else None
        for g in gpus or ():
            if isinstance(g, dict):
                n += 1
                for r in g.get("throttle") or ["none"]:
                    seen[r] = seen.get(r, 0) + 1
    return ", ".join(f"{k} ({v})" for k, v in sorted(seen.items())) + f" of {n}" if n else "(no card samples)"


def report(d: str) -> str:
    rows = json.load(open(os.path.join(d, "rows.json"))) if os.path.exists(os.path.join(d, "rows.json")) else []
    smi = []  # (t, used MiB, sm, max sm, power, limit, reasons)
    for r in _read(os.path.join(d, "smi_gpu.csv")):
        t = _smi_time(r[0])
        if t is not None and len(r) >= 10:
            smi.append((t, *[x.strip() for x in r[1:]]))
    apps: dict[float, float] = {}  # t -> sum of the listed processes' MiB (the hog's pid left out)
    hog = open(os.path.join(d, "hog.pid")).read().split() if os.path.exists(os.path.join(d, "hog.pid")) else []
    for r in _read(os.path.join(d, "smi_apps.csv")):
        if len(r) >= 3 and r[1].strip() not in hog:
            try:
                apps[float(r[0])] = apps.get(float(r[0]), 0.0) + float(r[2])
            except ValueError:
                continue
    side = [r for r in _read(os.path.join(d, "nvml_side.csv"))[1:] if len(r) >= 13]
    out = ["| run | profile / sharding | status | row: NVML device used | row: run's processes (NVML) "
           "| row: torch reserved | row: torch allocated | nvidia-smi memory.used max | nvidia-smi compute-apps max "
           "| raw NVML v2 used max / v1 | reserved - allocated | device used - reserved | clock-event reasons seen "
           "| fttui's samples: reasons (count) |",
           "|" + " --- |" * 14]
    for row in rows:
        t0, t1 = _when(row.get("started_at")), _when(row.get("ended_at"))
        if t0 is None or t1 is None:
            continue
        inside = lambda t: t0 <= t <= t1 + 1  # noqa: E731
        smi_max = max((float(s[1]) for s in smi if inside(s[0]) and s[1].replace(".", "").isdigit()), default=None)
        apps_max = max((v for t, v in apps.items() if inside(t)), default=None)
        v2 = max((float(s[2]) for s in side if inside(float(s[0])) and s[2]), default=None)
        v1 = max((float(s[3]) for s in side if inside(float(s[0])) and s[3]), default=None)
        reasons = sorted({n for s in side if inside(float(s[0])) for n in s[12].split("+") if n})
        own = fttui_reasons(d, row)
        used, proc = _first(row.get("peak_gpu_mem_mb")), _first(row.get("peak_gpu_proc_mb"))
        res, alloc = _first(row.get("peak_torch_reserved_mb")), _first(row.get("peak_torch_alloc_mb"))
        f = lambda v: "" if v is None else f"{v:,.0f}"  # noqa: E731
        gap = f(res - alloc) if res is not None and alloc is not None else ""
        ctx = f(used - res) if used is not None and res is not None else ""
        out.append(f"| {row.get('run_id') or row.get('id')} | {row.get('profile')} / {row.get('sharding')} "
                   f"| {row.get('status')} | {f(used)} | {f(proc)} | {f(res)} | {f(alloc)} | {f(smi_max)} | {f(apps_max)} "
                   f"| {f(v2)} / {f(v1)} | {gap} | {ctx} | {', '.join(reasons)} | {own} |")
    if side:
        seen: dict[str, int] = {}
        for s in side:
            seen[s[12] or "(none read)"] = seen.get(s[12] or "(none read)", 0) + 1
        out.append("")
        out.append("Clock-event reasons over the whole call (raw NVML samples): "
                   + ", ".join(f"{k}: {v}" for k, v in sorted(seen.items())))
        busy = [s for s in side if s[5] and float(s[5]) > 50]
        if busy:
            sm = sorted(float(s[6]) for s in busy if s[6])
            pw = sorted(float(s[8]) for s in busy if s[8])
            out.append(f"Busy samples (util > 50%): {len(busy)}; SM clock median {sm[len(sm) // 2]:.0f} of max "
                       f"{busy[0][7]} MHz; power median {pw[len(pw) // 2]:.0f} W of limit {busy[0][9]} W; "
                       f"max temperature {max(float(s[10]) for s in busy if s[10]):.0f} C")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "sample":
        sample(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        print(report(sys.argv[2]))
    else:
        sys.exit(__doc__)
