"""The harness hook channel: ``volunteer hook user-prompt`` and ``volunteer bootstrap``.

Everything the hook process imports lives here and stays light (stdlib + orjson): no Faust, no
aiokafka, no pydantic, because the hook's process start counts against a 300 ms latency goal.
The worker side of the channel is :mod:`pipeline.agents.answers` and :mod:`pipeline.agents.hooklane`.
"""
