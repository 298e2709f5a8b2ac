"""Watching a run from the command line: plain lines without a terminal, a Rich live view in one."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

from fttui.cli.ctrl_c import CtrlC
from fttui.cli.insight_lines import insight_lines
from fttui.core.base import fmt
from fttui.core.base.constants import EXIT_CODES, EXIT_ERROR, EXIT_INTERRUPTED
from fttui.core.base.inert import inert, output_line
from fttui.core.run.control.watch import RunFollower, next_attempt
from fttui.core.run.files.rundir import RunDir
from fttui.core.run.fold.insight import memory_picture, picture_text, speed_text
from fttui.core.run.fold.perf import mfu_text
from fttui.core.run.fold.phases import mmss, phase_text
from fttui.core.run.fold.ranks import clash_text
from fttui.core.run.fold.status import status_line
from fttui.core.run.row.row_figures import host_measure_text
from fttui.monitor import cards_run_first

# The Rich view's colour of each status kind (status_line's kind); the others are cyan.
STATUS_STYLES = {"oom": "bold white on red", "completed": "green"}


def progress_line(snap) -> str:
    parts = [f"step {snap.step}/{snap.total_steps or '?'}"]
    if snap.loss is not None:
        parts.append(f"loss {snap.loss:.4f}")
    if snap.samples_per_s is not None:
        parts.append(f"samples/s {snap.samples_per_s:.2f}")
    if snap.tokens_per_s is not None:
        parts.append(f"tokens/s {snap.tokens_per_s:.0f}")
    if snap.eta_s is not None:
        parts.append(f"ETA {fmt.eta(snap.eta_s, snap.eta_source)}")
    if snap.host is not None:
        parts.append(f"tree RSS {fmt.mb(snap.host.tree_rss_mb)}")  # the whole process tree, now
    if snap.gpu is not None and snap.gpu.available and snap.gpu.gpus:
        parts.append(gpu_part(snap.gpu))
    if snap.cards:
        parts.append("MFU " + " ".join(mfu_text(c.mfu) for c in snap.cards))
    return "  ".join(parts)


def near_oom_line(snap) -> str | None:
    """The headless warning when a card comes close to an OOM (fttui.core.run.fold.perf), else None:
    ``NEAR OOM: GPU 2: 3 allocator retries (lowest headroom 812 MB, threshold 4.0 GB)``."""
    if not snap.near_oom:
        return None
    card = next((c for c in snap.cards if c.near_oom), None)
    tail = ""
    if card is not None and card.min_headroom_mb is not None:
        tail = f" (lowest headroom {fmt.mb(card.min_headroom_mb)}, threshold {fmt.mb(card.threshold_mb)})"
    return f"NEAR OOM: {snap.near_oom_reason}{tail}"


def phase_lines(snap, printed: int) -> list[str]:
    """The headless lines of the phase changes after the first ``printed`` (a count: the
    snapshot's ``phase_history`` entries, then one for the end of the startup), each with the
    time the phase before it took: ``phase: building ops (loading the model took 00:04)``;
    ``phase: training (first step took 00:01)`` once the first step ended them. Times are the
    snapshot's own (events' and samples' ``t``)."""
    hist = list(snap.phase_history)
    if snap.startup_ended_t is not None and hist:
        hist.append(("training", snap.startup_ended_t))
    lines = []
    for i in range(printed, len(hist)):
        name, t = hist[i]
        text = phase_text(name) if name != "training" else name
        if i == 0:
            lines.append(f"phase: {text}")
            continue
        prev, t_prev = hist[i - 1]
        took = mmss(t - t_prev) if t is not None and t_prev is not None else "?"
        lines.append(f"phase: {text} ({phase_text(prev)} took {took})")
    return lines


def training_line(snap) -> str | None:
    """``training: 1,024 of 4,096 parameters trainable, 200 steps, world size 2``: what the
    training's start event told, and only that; ``None`` when nothing told any of it (a command
    without a Trainer, a run that ended before its start event)."""
    parts = []
    if snap.params_total is not None:
        trainable = "?" if snap.params_trainable is None else f"{snap.params_trainable:,}"
        parts.append(f"{trainable} of {snap.params_total:,} parameters trainable")
    if snap.total_steps is not None:
        parts.append(f"{snap.total_steps} steps")
    if snap.world_size is not None and snap.config is not None:  # said by a start event, not guessed
        parts.append(f"world size {snap.world_size}")
    return "training: " + ", ".join(parts) if parts else None


def _mb0(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def gpu_part(gpu) -> str:
    """``gpu run/dev/total MB *2 6100/18102/40960 *3 ... 0 -/4/40960``: per card the run's own
    memory, the device's used (as nvidia-smi shows it) and total; the run's cards first, marked
    ``*`` when CUDA_VISIBLE_DEVICES names them."""
    from fttui.monitor import cards_run_first

    named = gpu.visible is not None
    cards = " ".join(
        f"{'*' if named and c.run else ''}{c.gpu.index} {_mb0(c.gpu.proc_mem_mb)}/"
        f"{_mb0(c.gpu.mem_used_mb)}/{_mb0(c.gpu.mem_total_mb)}"
        for c in cards_run_first(gpu)
    )
    return f"gpu run/dev/total MB {cards}"


def summary_lines(rd: RunDir) -> list[str]:
    """The lines printed when a run ended: its status, then what the row knows, in groups; a
    group the row knows nothing of (a command that reported no training) is left out. The last
    says so when the results store did not take the row (``ROW NOT SAVED ...``)."""
    raw = _row(rd)
    if not raw:
        return [f"run {rd.run_id}: no summary row"]
    keep = {"duration_s", "wall_s", "peak_host_rss_mb", "peak_gpu_mem_mb", "error", "oom_kind"}
    row = {k: ("-" if v is None and k not in keep else v) for k, v in raw.items()}

    def shown(key: str) -> Any:
        """A figure as the summary says it: ``-`` when the row has none (``None`` or no key at
        all: a command run's row may lack the steps and samples it never reported)."""
        value = raw.get(key)
        return "-" if value is None else value

    def knows(*keys: str) -> bool:
        return any(raw.get(k) is not None for k in keys)

    told = [str(raw[k]) for k in ("oom_kind", "oom_phase") if raw.get(k)]  # oom (cpu, backward)
    lines = [f"run {row['run_id']}: {row['status']}" + (f" ({', '.join(told)})" if told else "")]
    if knows("model", "method", "batch_size", "grad_accum", "world_size", "max_seq_len"):
        lines.append(
            f"  model {shown('model')}  method {fmt.method_label(raw.get('method'), raw.get('sharding'))}"
            f"  batch {shown('batch_size')} x accum {shown('grad_accum')} x world {shown('world_size')}"
            f" = {shown('effective_batch')}  max_seq_len {shown('max_seq_len')}"
        )
    if knows("steps", "total_steps", "samples", "tokens"):
        lines.append(
            f"  steps {shown('steps')}/{shown('total_steps')}  samples {shown('samples')}"
            f"  tokens {shown('tokens')} (padded {shown('tokens_padded')})"
        )
        if raw.get("kind") == "command" and raw.get("sources"):  # what the command told, and how
            lines.append(f"  loss {shown('loss')}  read from: {raw['sources']}")
    if knows("samples_per_s", "samples_per_s_avg", "tokens_per_s", "tokens_padded_per_s"):
        lines.append(
            f"  samples/s {shown('samples_per_s')} (steady; whole run {shown('samples_per_s_avg')})"
            f"  tokens/s {shown('tokens_per_s')} non-padding, {shown('tokens_padded_per_s')} padded"
        )
    trained, wall = fmt.duration(raw.get("duration_s")), fmt.duration(raw.get("wall_s")) or "-"
    lines.append(
        (
            f"  duration {trained} training, {wall} wall"
            if trained
            else f"  duration {wall} wall (no training time reported)"
        )
        + f"  peak host RSS {fmt.mb(raw.get('peak_host_rss_mb'))}"
        f" ({host_measure_text(raw.get('host_measure')) or 'measure unknown'};"
        f" tree {fmt.mb(raw.get('peak_tree_rss_mb'))} sampled)"
        f"  peak GPU {_gpu_peaks(row)}"
    )
    perf = perf_summary(row)
    if perf:
        lines.append(perf)
    lines.extend(insight_lines(raw))
    if row.get("error"):
        lines.append(f"  {'note' if raw.get('status') == 'completed' else 'error'}: {row['error']}")
    if raw.get("oom_explained"):  # the phase and the estimate's term that grew (fttui.core.run.row.oomexplain)
        lines.append(f"  out of memory in the {raw['oom_explained']}")
    if raw.get("oom_held"):  # a CUDA one's snapshot (fttui.core.run.row.oomheld)
        lines.append(f"  held at the out of memory: {raw['oom_held']}")
    lines.append(f"  run dir {rd.path}")
    from fttui.core.run.supervising.kept_rows import unsaved_line

    unsaved = unsaved_line(rd)  # the store did not take the row: where it is, how to mend the store
    if unsaved:
        lines.append(unsaved)
    return lines


def _gpu_peaks(row: dict) -> str:
    """``12189 MB`` per card (the device's used memory), with the run's own processes' when NVML
    listed them: on a card another process shares, the device figure includes that process
    (``11702 MB device, 838 MB this run``)."""
    used = [x for x in row.get("peak_gpu_mem_mb") or [] if x is not None]
    own = [x for x in row.get("peak_gpu_proc_mb") or [] if x is not None]
    if not used:
        return "memory not measured"
    text = f"{';'.join(f'{x:.0f}' for x in used)} MB"
    return f"{text} device, {';'.join(f'{x:.0f}' for x in own)} MB this run" if own else text


def perf_summary(row: dict) -> str | None:
    """``  MFU 41% 40% per card (1.49e+10 FLOPs/token)  lowest headroom 9.3 GB 14.1 GB  allocator
    retries 0 0``, with ``NEAR OOM`` when a card came close; a CPU run's only ``  model 7.06e+05
    FLOPs/token``; None when the row has none of these."""

    def per_card(key: str, show) -> str:
        vals = row.get(key)
        return " ".join(show(v) for v in vals) if isinstance(vals, list) and vals else "-"

    fpt = row.get("flops_per_token")
    fpt = f"{fpt:.3g} FLOPs/token" if isinstance(fpt, (int, float)) else None
    if not isinstance(row.get("mfu"), list):  # no card (CPU run): the model's figure only
        return None if fpt is None else f"  model {fpt}"
    text = f"  MFU {per_card('mfu', mfu_text)} per card" + (f" ({fpt})" if fpt else "")
    if isinstance(row.get("min_headroom_mb"), list):
        text += f"  lowest headroom {per_card('min_headroom_mb', fmt.mb)}"
    if isinstance(row.get("alloc_retries"), list):
        text += f"  allocator retries {per_card('alloc_retries', lambda v: '-' if v is None else str(v))}"
    if row.get("near_oom") in (1, True):
        text += "  NEAR OOM"
    return text


def _say(line: str) -> None:
    """One line of the plain view: whatever a run's files put in it (an error, a name) inert."""
    print(inert(line, lines=True), flush=True)


def _row(rd: RunDir) -> dict | None:
    return rd.row()


def watch_run(rd: RunDir, rich_live: bool, cancel_on_interrupt: bool = True) -> int:
    """Follow the run until it ends; Ctrl-C cancels it, a second Ctrl-C before the cancel is sent
    detaches instead (:class:`CtrlC`). A run that ran out of memory and is continued by another
    attempt (``train.on_oom = "shrink"``): its summary, then the next attempt is followed, to the
    end of the chain (the exit code is the last's)."""
    ctrl = CtrlC(cancel_on_interrupt)
    current = [rd]
    old = signal.signal(signal.SIGINT, ctrl.on_int)
    _say(f"fttui: run {rd.run_id} ({rd.path})")
    try:
        while True:
            follower = RunFollower(current[0])
            (_follow_rich if rich_live else _follow_plain)(follower, ctrl.tick)
            nxt = next_attempt(current[0], follower.state.snapshot().retried_as) if follower.final is not None else None
            if nxt is None:
                break
            for line in summary_lines(current[0]):
                _say(line)
            _say(f"fttui: run {nxt.run_id} ({nxt.path}) continues it")
            current[0] = nxt
    except KeyboardInterrupt:
        print(f"\n{inert(ctrl.detached_line(current[0].run_id))}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, old)
    rd = current[0]
    if follower.final is None:
        print(f"fttui: the supervisor of {rd.run_id} is gone without a status", file=sys.stderr)
        return EXIT_ERROR
    for line in summary_lines(rd):
        _say(line)
    return EXIT_CODES.get(follower.final.status, EXIT_ERROR)


class OutputTail:
    """The new complete lines of a run's ``train.log``, as a terminal leaves them: a line redrawn
    with carriage returns (a progress bar) shows its last state. What ``--headless`` prints of a
    command run's own output."""

    def __init__(self, path) -> None:
        self.path, self.offset, self.rest = path, 0, b""

    def lines(self, final: bool = False) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(1 << 20)
        except OSError:
            data = b""
        self.offset += len(data)
        *complete, self.rest = (self.rest + data).split(b"\n")
        if final and self.rest:
            complete, self.rest = complete + [self.rest], b""
        out = []
        for raw in complete:
            parts = [p for p in raw.decode("utf-8", "replace").split("\r") if p.strip()]
            if parts:
                out.append(parts[-1].rstrip())
        return out


def _follow_plain(f: RunFollower, tick=lambda rd: None) -> None:
    last_print, last_step, started, stalled = 0.0, -1, False, False
    t0, said_waiting = time.monotonic(), False
    phases_printed, warned, said_clash, said_recovered = 0, None, None, False
    said: set[str] = set()
    prof = f.rd.profile()
    dev = prof.devices if prof is not None else None
    output = OutputTail(f.rd.log_path) if f.rd.kind_and_group()[0] == "command" else None
    while True:
        snap = f.poll()
        tick(f.rd)
        for line in output.lines(final=f.done) if output is not None else ():
            print(output_line(line), flush=True)  # its colours, no other escape (issue 36)
        if (
            not started
            and not said_waiting
            and dev is not None
            and int(dev.node_rank or 0) > 0
            and time.monotonic() - t0 > 5
        ):
            said_waiting = True
            _say(f"waiting for node 0 at {dev.main_addr}:{dev.main_port} (node {dev.node_rank} of {dev.nodes})")
        for line in phase_lines(snap, phases_printed):
            _say(line)
            phases_printed += 1
        if not started and snap.status != "starting":
            started = True
            told = training_line(snap)
            if told:
                _say(told)
        now = time.monotonic()
        if snap.step and snap.step != last_step and (now - last_print >= 1.0 or snap.step == snap.total_steps):
            _say(progress_line(snap))
            last_print, last_step = now, snap.step
        clash = clash_text(snap.rank_clash)
        if clash and clash != said_clash:  # two processes claim one rank: said once per change
            said_clash = clash
            _say(clash)
        warning = near_oom_line(snap)
        if warning is not None and snap.near_oom_reason != warned:
            warned = snap.near_oom_reason  # once per reason: the counters only grow
            _say(warning)
        if snap.recovered and not said_recovered:  # an attempt that continues a run which ran out of memory
            said_recovered = True
            _say(f"attempt {snap.attempt}: {snap.recovered}")
        creep = snap.memory_warnings[0] if snap.memory_warnings else None  # said once per rank and limit
        for line, key in (
            (
                f"MEMORY CREEP: {snap.memory_warning}",
                f"{creep.rank} {creep.where} {creep.figure}" if creep else snap.memory_warning,
            ),
            (f"why slow: {snap.why_slow}", " ".join((snap.why_slow or "").split()[:3]) or None),
            # the straggler (fttui.core.run.fold.skew): said once per rank the others wait for
            # (the worst window's: a rank named between two polls is said at the next)
            (f"SLOW RANK: {_named(snap)}", f"straggler {snap.skew_worst.rank}" if _named(snap) else None),
        ):
            if key is not None and key not in said:  # each warning, each leading cause: said once
                said.add(key)
                _say(line)
        if snap.stalled != stalled:
            stalled = snap.stalled
            _say(
                f"STALLED: {snap.stall_message or 'no step for the stall timeout'} (the process is alive)"
                + (f"; where: {snap.hang}" if snap.hang else "")
                if stalled
                else "resumed: training steps again"
            )
        if f.done or f.lost():
            if snap.step and snap.step != last_step:  # the last step, come within a second of the one said
                _say(progress_line(snap))
            _say(status_line(snap).text)
            return
        time.sleep(0.5)


def _follow_rich(f: RunFollower, tick=lambda rd: None) -> None:
    from rich.live import Live

    with Live(_render(f.poll(), f), refresh_per_second=4, transient=False) as live:
        while True:
            snap = f.poll()
            tick(f.rd)
            live.update(_render(snap, f))
            if f.done or f.lost():
                return
            time.sleep(0.5)


def _render(snap, f: RunFollower):
    from rich.console import Group
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    total = snap.total_steps or 0
    t.add_row(
        "progress",
        Group(
            ProgressBar(total=max(total, 1), completed=snap.step or 0, width=40),
            _text(
                f"step {snap.step}/{total or '?'}  elapsed {fmt.duration(snap.wall_elapsed)}"
                f"  ETA {fmt.eta(snap.eta_s, snap.eta_source) or '-'}"
            ),
        ),
    )
    t.add_row(
        "throughput",
        _text(
            f"{_f(snap.samples_per_s)} samples/s  {_f(snap.tokens_per_s, 0)} tokens/s (steady, "
            f"non-padding)  {_f(snap.tokens_padded_per_s, 0)} padded"
        ),
    )
    t.add_row("loss", _text(_f(snap.loss, 4)))
    if snap.host is not None:
        h = snap.host
        t.add_row(
            "host",
            _text(
                f"RAM {fmt.mb(h.ram_used_mb)} / {fmt.mb(h.ram_total_mb)}  swap {fmt.mb(h.swap_used_mb)}"
                f"  tree RSS {fmt.mb(h.tree_rss_mb)} (sampled peak {fmt.mb(snap.host_peak_tree_rss_mb)})"
            ),
        )
    if snap.gpu is not None:
        if snap.gpu.available:
            named = snap.gpu.visible is not None
            perf = {p.index: p for p in snap.cards}
            for c in cards_run_first(snap.gpu):
                g = c.gpu
                p = perf.get(g.index) if c.run else None
                line = _text(
                    f"run {fmt.mb(g.proc_mem_mb)}  device {fmt.mb(g.mem_used_mb)} / {fmt.mb(g.mem_total_mb)}"
                    f"  util {fmt.pct(g.util_pct)}  {g.name}"
                )
                extra = [x for x in (speed_text(g), _picture(snap, g, c.run)) if x]
                if extra:
                    line.append(inert("\n" + "  ".join(extra), lines=True))
                if p is not None:
                    line.append(
                        inert(
                            f"\nMFU {mfu_text(p.mfu)}  headroom {fmt.mb(p.headroom_mb)}"
                            + (f"  allocator retries {p.alloc_retries}" if p.alloc_retries is not None else "")
                            + (f"  NEAR OOM: {p.reason}" if p.near_oom else ""),
                            lines=True,
                        ),
                        style="bold red" if p.near_oom else "",
                    )
                t.add_row(_text(f"GPU {g.index}" + (" *run" if named and c.run else "")), line)
        else:
            t.add_row("GPU", _text(snap.gpu.reason or "not available"))
    if snap.why_slow:
        t.add_row("why slow", _text(snap.why_slow))
    if snap.straggler:
        t.add_row("slow rank", _text(snap.straggler, style="bold yellow"))
    line = status_line(snap)
    t.add_row("status", _text(line.text, style=STATUS_STYLES.get(line.kind, "cyan")))
    return Panel(t, title=_text(f"fttui  {f.rd.run_id}"), border_style="blue")


def _named(snap) -> str | None:
    """The straggler the run's worst window named (fttui.core.run.fold.skew), in words."""
    worst = getattr(snap, "skew_worst", None)
    return worst.text if worst is not None and worst.rank is not None else None


def _text(value: str, style: str = ""):
    """A text of the Rich view: data, never markup, nothing a terminal would obey (issue 36)."""
    from rich.text import Text

    return Text(inert(value, lines=True), style=style)


def _picture(snap, g, run: bool) -> str | None:
    """The run card's memory picture (torch allocated / reserved / the rest of the run's NVML memory)."""
    if not run:
        return None
    slot = [c.gpu.index for c in cards_run_first(snap.gpu) if c.run].index(g.index)  # its CUDA device number
    pic = memory_picture(snap, g, slot)
    return picture_text(pic) if pic is not None and pic.reserved is not None else None


def _f(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"
