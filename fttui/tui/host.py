"""What the screens ask of the app beyond Textual's :class:`~textual.app.App`: the services of
:class:`fttui.tui.app.FttuiApp` (a GPU snapshot, a launch, a run screen, the bookkeeping), as a
type. The screens reach them through :func:`host`; importing the app class itself would close an
import cycle (the app imports every screen), which the import contracts refuse."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from fttui.core.profiles.typed import Profile
    from fttui.core.run.files.rundir import RunDir
    from fttui.monitor import GpuSnapshot


class Host(Protocol):
    def sample_gpus(self) -> GpuSnapshot: ...

    def launch_run(self, resolved: Profile) -> RunDir: ...

    def show_run(self, rd: RunDir) -> None: ...

    def can_go_back(self) -> bool: ...

    def start_bookkeeping(self) -> None: ...


def host(node: DOMNode) -> Host:
    """The running app of ``node`` (a screen or widget of fttui's app), as its :class:`Host`."""
    return cast("Host", node.app)


__all__ = ["Host", "host"]
