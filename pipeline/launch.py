"""What a harness runs on every prompt: ``<python> -I -S <this file> hook user-prompt [...]``.

``volunteer bootstrap`` writes that command (docs/hooks.md, "Start-up"). The ``volunteer``
console script starts the interpreter with ``site``, which scans site-packages and runs every
``.pth`` file there (setuptools' distutils shim, editable-install hooks): ~7 ms of CPU per prompt,
a third of the interpreter's own start-up, for a process that needs nothing from site-packages.
``-S`` skips it; this file then puts the one folder the hook's code lives in (the one holding the
``pipeline`` package, found from this file's own path, not from the environment) at the end of
``sys.path``, after the standard library, so nothing there can shadow a stdlib module.

``-I`` keeps the hook to that: no ``PYTHONPATH``, no ``PYTHONSTARTUP``-like variables, no user
site-packages, and not this file's own folder on ``sys.path`` (whose ``http.py`` would otherwise
stand in for the stdlib's). It also ignores ``PYTHONDONTWRITEBYTECODE``, so the byte-code cache of
the hook's modules is used and kept, whatever the harness's environment says.

The cyclic garbage collector is off: the process lives for one prompt (its deadline, 800 ms by
default), its inputs are capped, and the collections that its imports and its few thousand
objects set off were 1-3 ms of its CPU (docs/hooks.md, "Speed"). Reference counting still frees
everything else.

Every other command, ``--help`` included, goes to the click CLI (:mod:`pipeline.entry`),
which turns site-packages and the collector back on first.
"""

import gc
import sys
from os.path import abspath, dirname

gc.disable()

_HERE = dirname(abspath(__file__))
while _HERE in sys.path:  # run without -I: the package folder is not a top-level import path
    sys.path.remove(_HERE)
_ROOT = dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

sys.argv[0] = "volunteer"  # how --help and errors name the program

from pipeline.entry import main  # noqa: E402 - the path has to be set first

main()
