"""Model architectures: the built-in table of reference architectures and the numbers of an
architecture (sizes, heads, parameter count) read from a resolved profile."""
