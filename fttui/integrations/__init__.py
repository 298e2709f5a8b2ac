"""fttui's integrations with training libraries, for scripts fttui did not write.

- :mod:`fttui.integrations.hf`: ``FttuiCallback``, a Hugging Face ``TrainerCallback`` that writes
  fttui's events to the run directory named by ``FTTUI_RUN_DIR`` (docs/commands.md);
- ``fttui/integrations/autoload/sitecustomize.py``: what ``fttui run -- CMD`` puts first on the
  command's ``PYTHONPATH`` so that every ``transformers.Trainer`` gets that callback.

This package may import the core and the training stack (transformers), never the app or the
CLI; the core never imports it (import-linter contracts in pyproject.toml).
"""
