"""fttui's integrations with training libraries, for scripts fttui did not write.

- :mod:`fttui.integrations.hf`: ``FttuiCallback``, a Hugging Face ``TrainerCallback`` that writes
  fttui's events to the run directory named by ``FTTUI_RUN_DIR`` (docs/commands.md);
- :mod:`fttui.integrations.lightning`: fttui's Lightning callback (steps, samples, loss per rank);
- :mod:`fttui.integrations.reporter`: the step reporter of any loop, which the Lightning callback
  and the public reporting API (:mod:`fttui.report`) drive;
- ``fttui/integrations/autoload/sitecustomize.py``: what ``fttui run -- CMD`` puts first on the
  command's ``PYTHONPATH`` so that every ``transformers.Trainer`` and Lightning ``Trainer`` gets
  its callback.

This package may import the core and the training stack (transformers), never the app or the
CLI; the core never imports it, :mod:`fttui.report` alone does (import-linter contracts in
pyproject.toml).
"""
