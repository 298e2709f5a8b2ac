"""Training data files: the torch-free reader and validator of instruction / chat records, used
before launch (preflight) and by the worker."""
