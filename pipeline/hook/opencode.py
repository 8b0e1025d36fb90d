"""opencode has no command hooks: a small plugin runs the hook command on each user message.

opencode (npm ``opencode-ai``) loads every ``.js`` file in ``~/.config/opencode/plugins/`` (user)
and ``<dir>/.opencode/plugins/`` (project) as a plugin. Ours registers the ``chat.message`` hook,
which opencode calls with each new user message before it is sent: it pipes the same JSON a
``UserPromptSubmit`` hook gets (``session_id``, ``prompt``, ``cwd``) to ``volunteer hook
user-prompt --harness opencode``, and adds the printed block to the message as a synthetic text
part, which the model receives after the prompt. Anything going wrong (no worker, a crash, the
timeout) adds nothing: the prompt goes out unchanged.

The whole file is ours and is generated from the hook command: bootstrap rewrites it when the
command changes and deletes it on ``--uninstall``. It is recognised by its first line, and the
command is kept on the second so the doctor can read it back without running JavaScript.
"""

from __future__ import annotations

import json

PLUGIN_NAME = "volunteer-stream.js"
FIRST_LINE = "// volunteer-stream: opencode plugin written by 'volunteer bootstrap --harness opencode'"
COMMAND_MARK = "// hook command: "

_BODY = r"""// It runs the hook command on each user message and adds the printed block as a synthetic text part.
// 'volunteer bootstrap --harness opencode --uninstall' removes this file.
import { spawn } from "node:child_process";

const COMMAND = __COMMAND__;
const TIMEOUT_MS = __TIMEOUT_MS__;

function runHook(payload) {
  return new Promise((resolve) => {
    let out = "";
    let child;
    try {
      child = spawn("/bin/sh", ["-c", COMMAND], { stdio: ["pipe", "pipe", "ignore"] });
    } catch {
      resolve("");
      return;
    }
    const timer = setTimeout(() => child.kill("SIGKILL"), TIMEOUT_MS);
    child.stdout.on("data", (chunk) => { out += chunk; });
    child.on("error", () => { clearTimeout(timer); resolve(""); });
    child.on("close", () => { clearTimeout(timer); resolve(out); });
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(payload));
  });
}

function blockOf(stdout) {
  try {
    const context = JSON.parse(stdout)?.hookSpecificOutput?.additionalContext;
    return typeof context === "string" ? context : "";
  } catch {
    return "";
  }
}

export const VolunteerStream = async ({ directory }) => ({
  "chat.message": async (input, output) => {
    const parts = Array.isArray(output?.parts) ? output.parts : [];
    const prompt = parts.filter((p) => p && p.type === "text" && !p.synthetic).map((p) => p.text).join("\n");
    if (!prompt.trim() || !input?.sessionID) return;
    const block = blockOf(await runHook({ session_id: input.sessionID, prompt, cwd: directory,
                                          hook_event_name: "UserPromptSubmit", transcript_path: null }));
    if (!block) return;
    const last = parts[parts.length - 1] || {};
    parts.push({ id: (last.id || "prt_volunteer") + "_volunteer", sessionID: last.sessionID || input.sessionID,
                 messageID: last.messageID || output?.message?.id, type: "text", text: block, synthetic: true });
  },
});
"""


def plugin_text(command: str, timeout_s: int) -> str:
    """The plugin file for this hook command (a JSON string is a valid JavaScript string literal)."""
    head = f"{FIRST_LINE}\n{COMMAND_MARK}{json.dumps(command)}\n"
    return head + _BODY.replace("__COMMAND__", json.dumps(command)).replace("__TIMEOUT_MS__", str(timeout_s * 1000))


def plugin_command(text: str) -> str | None:
    """The hook command of a plugin file of ours, ``None`` for any other file."""
    lines = text.splitlines()
    if len(lines) < 2 or lines[0] != FIRST_LINE or not lines[1].startswith(COMMAND_MARK):
        return None
    try:
        command = json.loads(lines[1][len(COMMAND_MARK):])
    except ValueError:
        return None
    return command if isinstance(command, str) else None
