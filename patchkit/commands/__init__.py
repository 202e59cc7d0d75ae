"""One module per command: each parses its options and calls one core function (imported inside the
command, so ``patchkit --help`` loads almost nothing). ``patchkit/cli.py`` gathers them into the
``patchkit`` group; ``options.py`` holds what several commands share (``--set``, ``--target``, the
output flags, the server options of smoke and bench, the exit codes of ``--help``)."""
