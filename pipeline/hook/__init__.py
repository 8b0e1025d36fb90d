"""The harness hook channel: ``volunteer hook user-prompt`` and ``volunteer bootstrap``.

Everything the hook process imports lives here and stays light: C modules of the stdlib (``_json``
through :mod:`pipeline.jsonlite`, ``_socket``, ``_signal``, ``fcntl``, ``_blake2``), not even
``json``, ``socket.py`` or ``signal.py`` (they load ``re`` and ``enum``); no orjson, dataclasses,
pathlib or typing at run time, and no click on the fast path (:mod:`pipeline.entry`). A harness
starts it as ``python -I -S`` with :mod:`pipeline.launch` (no site-packages scan), because the
hook's process start counts against its latency goal (p50 ≤ 40 ms, p99 ≤ 100 ms, docs/hooks.md).
The worker side of the channel is :mod:`pipeline.agents.answers` and :mod:`pipeline.agents.hooklane`.
"""
