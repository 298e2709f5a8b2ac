"""The end of a run: its final status and its summary row, folded from the run directory's
records and the folded snapshot, with what only the printed log says (an OOM in a command's
output). It neither launches nor signals.
"""
