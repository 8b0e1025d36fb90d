"""The harness hook channel: ``volunteer hook user-prompt`` and ``volunteer bootstrap``.

Everything the hook process imports lives here and stays light: a few stdlib modules (json, socket,
fcntl, signal), no orjson, dataclasses, pathlib or typing at run time, and no click on the fast path
(:mod:`pipeline.hook.entry`), because the hook's process start counts against a 300 ms latency goal.
The worker side of the channel is :mod:`pipeline.agents.answers` and :mod:`pipeline.agents.hooklane`.
"""
