"""fttui's automatic Trainer callback for the commands it runs (docs/commands.md).

``fttui run -- CMD`` puts this folder first on the command's ``PYTHONPATH``, so every Python
process of the command (torchrun's, accelerate's and DeepSpeed's ranks included) imports this
module at startup. With ``FTTUI_RUN_DIR`` set and ``FTTUI_INJECT`` not ``0`` it watches for the
import of ``transformers.trainer`` and then:

- wraps ``Trainer.__init__`` so that every Trainer (and subclass: TRL's, LLaMA-Factory's) gets
  :class:`fttui.integrations.hf.FttuiCallback`, unless the script added one itself;
- wraps ``Trainer.train`` so that an exception out of training is written as an ``error`` event
  (OOM kind included) before it propagates unchanged;
- writes the ``loading-model`` phase (the script is importing its training stack).

It watches for the import of Lightning's trainer (``lightning.pytorch.trainer.trainer`` or
``pytorch_lightning.trainer.trainer``) too, and wraps that ``Trainer.__init__`` so that every
Lightning Trainer gets fttui's Lightning callback (:mod:`fttui.integrations.lightning`) unless
it has one. And where the command's Python has no ``fttui`` of its own, ``import fttui`` finds
the fttui this file belongs to (its reporting API, :mod:`fttui.report`, is stdlib only).

Nothing else is changed, and nothing is imported before the script imports one of them. Any
failure in here is swallowed: one line on stderr (the run's log) and the traceback in the run
directory's ``integration.log``; the script runs as it would without fttui. A ``sitecustomize``
that this one shadows on ``sys.path`` is run afterwards.
"""

from __future__ import annotations


def _fail(what: str, exc: BaseException) -> None:
    import os
    import sys
    import time
    import traceback

    try:
        print(
            f"fttui: {what} failed ({type(exc).__name__}: {exc}); the script runs without fttui's callback",
            file=sys.stderr,
            flush=True,
        )
        run_dir = os.environ.get("FTTUI_RUN_DIR")
        if run_dir:
            with open(os.path.join(run_dir, "integration.log"), "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {what}\n")
                f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    except Exception:
        pass


def _load_hf():
    """fttui.integrations.hf (:func:`_load`)."""
    return _load("hf")


def _load(name: str):
    """``fttui.integrations.NAME``: imported when this Python's ``fttui`` is the one this file
    belongs to, else loaded from the file next to this folder (fttui not installed in the
    command's Python)."""
    import importlib
    import importlib.util
    import os
    import sys

    pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fttui/integrations
    spec = importlib.util.find_spec("fttui")
    origin = os.path.dirname(os.path.abspath(spec.origin)) if spec is not None and spec.origin else None
    if origin is not None and os.path.join(origin, "integrations") == pkg_dir:
        return importlib.import_module(f"fttui.integrations.{name}")
    mod_name = f"_fttui_integrations_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    mod_spec = importlib.util.spec_from_file_location(mod_name, os.path.join(pkg_dir, f"{name}.py"))
    if mod_spec is None or mod_spec.loader is None:
        raise ImportError(f"{pkg_dir}: no {name}.py to load")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[mod_name] = module
    mod_spec.loader.exec_module(module)
    return module


def _patch(trainer_module) -> None:
    """Wrap ``Trainer.__init__`` and ``Trainer.train`` of the freshly imported module."""
    import functools
    import os
    import time

    hf = _load_hf()
    run_dir = os.environ["FTTUI_RUN_DIR"]
    try:
        rank = int(os.environ.get("RANK", "0"))
    except ValueError:
        rank = 0
    hf.append_event(run_dir, "phase", phase="loading-model", t=time.time(), rank=rank, source="injected")
    Trainer = trainer_module.Trainer
    init, train = Trainer.__init__, Trainer.train

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        try:
            hf.attach(self, via="injected")
        except Exception as e:
            _fail("adding fttui's callback to the Trainer", e)

    @functools.wraps(train)
    def train_(self, *args, **kwargs):
        try:
            return train(self, *args, **kwargs)
        except BaseException as e:
            hf.report_error(self, e)
            raise

    Trainer.__init__ = __init__
    Trainer.train = train_


def _patch_lightning(trainer_module) -> None:
    """Wrap ``Trainer.__init__`` of a freshly imported Lightning (``lightning.pytorch`` or
    ``pytorch_lightning``): every Trainer gets fttui's Lightning callback
    (:mod:`fttui.integrations.lightning`)."""
    import functools
    import importlib

    package = trainer_module.__name__.rsplit(".trainer.trainer", 1)[0]
    base = importlib.import_module(f"{package}.callbacks").Callback
    lit = _load("lightning")
    Trainer = trainer_module.Trainer
    init = Trainer.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        try:
            lit.attach(self, base)
        except Exception as e:
            _fail("adding fttui's callback to the Lightning Trainer", e)

    Trainer.__init__ = __init__


#: the modules whose import the hook waits for, and what it does to each once it ran
_TARGETS = {
    "transformers.trainer": _patch,
    "lightning.pytorch.trainer.trainer": _patch_lightning,
    "pytorch_lightning.trainer.trainer": _patch_lightning,
}


TYPE_CHECKING = False  # typing is not imported at every interpreter's start for this
if TYPE_CHECKING:
    from importlib.abc import Loader as _LoaderType
else:
    _LoaderType = object  # importlib.abc costs its import (importlib.resources); a loader is its methods


class _Loader(_LoaderType):
    """The real loader of a module of ``_TARGETS``, then its patch."""

    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as e:
            _fail("fttui's Trainer hook", e)


class _Finder:
    """Finds the modules of ``_TARGETS`` with the other finders and hands back their specs with
    the loader wrapped; every other module is left to them."""

    def __init__(self, targets):
        self.targets = dict(targets)

    def find_spec(self, name, path=None, target=None):
        if name not in self.targets:
            return None
        import sys

        patch = self.targets.pop(name)  # once each: asked again (below) this finder passes
        if not self.targets:
            try:
                sys.meta_path.remove(self)  # every target found: the other finders answer from here on
            except ValueError:
                pass
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _Loader(spec.loader, patch)
            return spec
        except Exception as e:
            _fail("fttui's Trainer hook", e)
            return None


class _FttuiPackage:
    """``import fttui`` in a Python where fttui is not installed (fttui in its own environment, the
    command in another): the fttui this file belongs to, whose reporting API (:mod:`fttui.report`)
    and integrations need the standard library only. Last on ``sys.meta_path``: asked only when no
    other finder found a ``fttui``."""

    def find_spec(self, name, path=None, target=None):
        if name != "fttui":
            return None
        import importlib.util
        import os

        pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return importlib.util.spec_from_file_location(
            "fttui", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg]
        )


def _chain_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this module shadows (a distribution's or a virtualenv's)."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    paths = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _install() -> None:
    import os
    import sys

    if not os.environ.get("FTTUI_RUN_DIR") or os.environ.get("FTTUI_INJECT", "1") == "0":
        return
    sys.meta_path.append(_FttuiPackage())
    targets = dict(_TARGETS)
    for name in list(targets):
        if name in sys.modules:  # imported already (an interactive start-up): patch it now
            targets.pop(name)(sys.modules[name])
    if targets:
        sys.meta_path.insert(0, _Finder(targets))


try:
    _install()
except Exception as _e:  # never stop the command's Python
    _fail("fttui's Trainer hook", _e)

try:
    _chain_next_sitecustomize()
except Exception as _e:
    _fail("the sitecustomize after fttui's", _e)
