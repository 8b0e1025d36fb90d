"""One AES-GCM state key for every worker a test session starts (pipeline/agents/statecrypt.py).

Workers of one app id must share the key; without one each would create the default key file in
the real home directory. Test code that builds a worker's environment adds ``STATE_KEY_ENV``.
"""

from __future__ import annotations

from pipeline.agents.statecrypt import new_key_text

TEST_STATE_KEY = new_key_text()
STATE_KEY_ENV = {"VOLUNTEER_STATE_KEY": TEST_STATE_KEY}
