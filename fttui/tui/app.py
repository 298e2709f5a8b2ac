"""The fttui app (Textual): profile picker, run screen, results.

Thin: it shows what the core computes and sends intents (launch, cancel) to it. It never
imports the training stack (torch, transformers, peft); see docs/architecture.md.

    run_app()                          # the picker
    run_app(launch_profile=resolved)   # launch, then the run screen
    run_app(attach="runs/<id>")        # the run screen of a live or finished run
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from textual.app import App
from textual.binding import Binding
from textual.content import Content
from textual.notifications import SeverityLevel

from fttui.core.base.errors import FttuiError
from fttui.core.base.inert import inert

if TYPE_CHECKING:  # imported where used: the first frame does not wait for the run modules
    from fttui.core.profiles.typed import Profile
    from fttui.core.run.files.rundir import RunDir
    from fttui.monitor import GpuSnapshot
    from fttui.tui.host import Host


class FttuiApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "fttui"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+q", "quit", "Quit", show=False),
        Binding("r", "results", "Results"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("p", "probe", "Probe", show=False),
        # Priority, on every screen: the focus moves as the app reads the Tab, so keys typed right
        # behind it (a fast typist, a paste over SSH) go to the field it reaches. Textual's own Tab
        # is an ordinary binding: it moves the focus only after bubbling up through the screen's
        # queue, and on a busy machine the digits went to the list and were lost.
        Binding("tab", "focus_next", show=False, priority=True),
        Binding("shift+tab", "focus_previous", show=False, priority=True),
    ]

    def __init__(self, launch_profile: Profile | None = None, attach: str | None = None, gpu_sampler=None) -> None:
        super().__init__()
        self.launch_profile = launch_profile
        self.attach = attach
        self._gpu_sampler = gpu_sampler
        self.runs: list[RunDir] = []  # runs this session launched or attached to
        self.exit_code = 0
        self._sampler_lock = threading.Lock()  # the picker samples from a thread worker
        self._bookkeeping_started = False

    # ---------------------------------------------------------------- text from outside (issue 36)
    def format_title(self, title: str, sub_title: str) -> Content:
        """The header's title: a screen's subtitle names a run id, a profile (a file's name):
        shown inert (fttui.tui.plain), as every text from outside is."""
        return super().format_title(inert(title), inert(sub_title))

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Textual's notice (every ``notify`` of a screen or widget comes here), its message and
        title inert: notices name run ids, errors and paths. fttui's own notices pass
        ``markup=False`` (tests/tui/test_hostile_text.py checks each): their text is never markup."""
        super().notify(
            inert(message, lines=True), title=inert(title), severity=severity, timeout=timeout, markup=markup
        )

    # ---------------------------------------------------------------- services for the screens
    @property
    def gpu_sampler(self):
        with self._sampler_lock:
            if self._gpu_sampler is None:
                from fttui.monitor import make_gpu_sampler

                self._gpu_sampler = make_gpu_sampler()
            return self._gpu_sampler

    def sample_gpus(self) -> GpuSnapshot:
        """A GPU snapshot (callable from a thread worker); never raises."""
        try:
            return self.gpu_sampler.sample()
        except Exception as e:  # samplers should never raise; a broken one must not crash us
            from fttui.monitor import GpuSnapshot

            return GpuSnapshot(available=False, reason=f"GPU sampler failed: {e}")

    def launch_run(self, resolved: Profile) -> RunDir:
        """Launch a resolved profile (validates first; FttuiError on bad input) and show it."""
        from fttui.core.experiments.quick_forecast import launch_forecast
        from fttui.core.run.launching.executors import LocalRun

        rd = LocalRun(resolved, forecast=lambda: launch_forecast(resolved)).start()
        self.show_run(rd)
        return rd

    def show_run(self, rd: RunDir) -> None:
        from fttui.tui.run_screen import RunScreen

        if rd not in self.runs:
            self.runs.append(rd)
        self.push_screen(RunScreen(rd))

    # ---------------------------------------------------------------- lifecycle
    def get_default_screen(self):
        """The picker is the app's first screen (no screen pushed over a blank one: one layout,
        one style pass before the first frame); attaching or launching starts on a blank one."""
        if self.attach or self.launch_profile is not None:
            return super().get_default_screen()
        from fttui.tui.picker import PickerScreen

        return PickerScreen()  # it starts the bookkeeping once its first frame is out

    def can_go_back(self) -> bool:
        """A screen below the current one to go back to (not the blank first screen)."""
        stack = self.screen_stack
        return len(stack) > 1 and stack[-2].id != "_default"

    def on_mount(self) -> None:
        if self.attach:
            from fttui.core.run.files.rundir import RunDir

            self.call_after_refresh(self.start_bookkeeping)  # after the first frame
            self.show_run(RunDir(self.attach))
        elif self.launch_profile is not None:
            self.call_after_refresh(self.start_bookkeeping)
            try:
                self.launch_run(self.launch_profile)
            except FttuiError as e:
                from fttui.tui.picker import PickerScreen

                self.push_screen(PickerScreen(error=str(e)))

    def start_bookkeeping(self) -> None:
        """Finish the runs whose supervisor died (fttui.core.run.supervising.recover), once, in a thread
        worker; called after the first frame, never before it."""
        if self._bookkeeping_started:
            return
        self._bookkeeping_started = True
        self.run_worker(self._finish_orphans_now, thread=True, group="bookkeeping", exit_on_error=False)

    def _finish_orphans_now(self) -> None:
        """Write the rows of runs whose supervisor died and whose training has ended since."""
        from fttui.core.run.supervising.recover import recover_all

        done = recover_all()
        if done:
            names = ", ".join(rd.run_id for rd, _ in done[:3]) + (" ..." if len(done) > 3 else "")
            self.call_from_thread(
                self.notify,
                f"finished {len(done)} run(s) whose supervisor had died: {names}",
                title="rows written",
                markup=False,
            )

    # ---------------------------------------------------------------- actions
    def live_runs(self) -> list[RunDir]:
        from fttui.core.run.processes import liveness

        out = []
        for rd in self.runs:
            try:
                if rd.exists() and liveness.is_live(rd):
                    out.append(rd)
            except OSError:
                pass
        return out

    async def action_quit(self) -> None:
        live = self.live_runs()
        if not live:
            self.stop_probes()
            self.exit(self.exit_code)
            return
        from fttui.core.run.control.executors import executor_for
        from fttui.tui.dialogs import QuitScreen

        def done(choice: str | None) -> None:
            if choice in ("stop", "detach"):
                self.stop_probes()  # a probe is the app's own work: it never outlives it
            if choice == "stop":
                for rd in live:
                    try:
                        executor_for(rd).cancel()  # a Slurm job's: scancel, as `fttui cancel`
                    except (OSError, FttuiError):
                        pass
                self.exit(self.exit_code)
            elif choice == "detach":
                self.exit(self.exit_code)

        if not isinstance(self.screen, QuitScreen):
            self.push_screen(QuitScreen([rd.run_id for rd in live]), done)

    def action_results(self) -> None:
        from fttui.tui.results import ResultsScreen

        if not isinstance(self.screen, ResultsScreen):
            self.push_screen(ResultsScreen())

    def action_help(self) -> None:
        from fttui.tui.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_probe(self) -> None:
        from fttui.tui.picker import PickerScreen
        from fttui.tui.probe_screen import ProbeScreen

        if isinstance(self.screen, PickerScreen):
            self.screen.action_probe()
        elif not isinstance(self.screen, ProbeScreen):
            self.notify("p probes a profile: choose it in the profile list first", severity="warning", markup=False)

    def stop_probes(self) -> None:
        """Stop every probe the app's screens are running (their processes are killed)."""
        from fttui.tui.probe_screen import ProbeScreen

        for screen in self.screen_stack:
            if isinstance(screen, ProbeScreen):
                screen.stop_probe(show=False)


def run_app(launch_profile: Profile | None = None, attach: str | None = None, gpu_sampler=None) -> int:
    """Run the app; returns the exit code (0 normally)."""
    app = FttuiApp(launch_profile=launch_profile, attach=attach, gpu_sampler=gpu_sampler)
    result = app.run()
    return int(result or 0) if app.return_code in (None, 0) else int(app.return_code)


if TYPE_CHECKING:
    _HOST: type[Host] = FttuiApp  # the app is what the screens take it for (fttui.tui.host)

__all__ = ["FttuiApp", "run_app"]
