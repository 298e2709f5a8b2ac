"""fttui: a terminal tool to run and monitor LLM fine-tuning."""

__version__ = "0.1.0"
