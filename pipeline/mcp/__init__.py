"""``volunteer mcp``: the one-shot op as an MCP server (tools ``volunteer_context``, ``volunteer_stats``,
``volunteer_opened``), built on the official MCP Python SDK. See docs/mcp.md."""
