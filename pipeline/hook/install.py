"""Installing the hook in a harness's settings: idempotent, surgical, reversible.

Claude Code reads ``hooks.UserPromptSubmit`` from ``settings.json`` (user: ``~/.claude``,
project: ``<dir>/.claude``, local: ``<dir>/.claude/settings.local.json``). Codex reads the same
shape from ``hooks.json`` (user: ``~/.codex``, project: ``<dir>/.codex``). Each event holds a list
of matcher groups, each with a ``hooks`` list of ``{"type": "command", "command", "timeout"}``.
opencode has no command hooks: there the "settings file" is a plugin of ours that runs the same
command (:mod:`pipeline.hook.opencode`), written whole and deleted on uninstall.

Our entry is recognised by its command (the ``volunteer`` executable, ``-m pipeline`` or the
launcher :mod:`pipeline.hook.launch`, followed by ``hook user-prompt``), not by an extra marker key: Codex's config parsing is strict about unknown keys.
Installing removes any earlier entry of ours and adds one; uninstalling removes ours and any
group or event list that only held it. Everything else in the file (other hooks, permissions,
unknown keys, key order) is left as it was. A file that is not valid JSON is never rewritten.
"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.hook.opencode import PLUGIN_NAME, plugin_command, plugin_text

EVENT = "UserPromptSubmit"
DEFAULT_TIMEOUT_S = 5
SCOPES = ("user", "project", "local")
HARNESSES = ("claude-code", "codex", "opencode")


class InstallError(Exception):
    """A one-line reason the settings cannot be changed."""


@dataclass(frozen=True, slots=True)
class Plan:
    path: Path
    before: str  # "" when the file does not exist
    after: str
    changed: bool
    summary: str
    delete: bool = False  # remove the file (an opencode plugin of ours on uninstall)

    def diff(self) -> str:
        label = str(self.path)
        return "".join(difflib.unified_diff(self.before.splitlines(keepends=True),
                                            self.after.splitlines(keepends=True),
                                            fromfile=label if self.before else "/dev/null", tofile=label))


def settings_path(harness: str, scope: str, project_dir: Path | None = None,
                  env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    project = (project_dir or Path.cwd()).resolve()
    if harness == "opencode":
        if scope == "local":
            raise InstallError("opencode has no local settings scope; use --scope user or --scope project")
        if scope == "user":
            config_home = env.get("XDG_CONFIG_HOME", "").strip()
            return (Path(config_home) if config_home else home / ".config") / "opencode" / "plugins" / PLUGIN_NAME
        return project / ".opencode" / "plugins" / PLUGIN_NAME
    if harness == "codex":
        if scope == "local":
            raise InstallError("Codex has no local settings scope; use --scope user or --scope project")
        if scope == "user":
            codex_home = env.get("CODEX_HOME", "").strip()
            return (Path(codex_home) if codex_home else home / ".codex") / "hooks.json"
        return project / ".codex" / "hooks.json"
    if scope == "user":
        claude_dir = env.get("CLAUDE_CONFIG_DIR", "").strip()
        return (Path(claude_dir) if claude_dir else home / ".claude") / "settings.json"
    return project / ".claude" / ("settings.local.json" if scope == "local" else "settings.json")


LAUNCHER = Path(__file__).parent.parent / "launch.py"
LAUNCHER_FLAGS = ("-I", "-S")
"""No site-packages scan and no environment (see :mod:`pipeline.hook.launch`): ~8 ms less per prompt."""


def default_executable() -> list[str]:
    """``<this interpreter> -I -S <the launcher>``: the fastest start of the hook, from this installation.

    Absolute paths, so a harness started from a desktop launcher (no shell PATH) runs this
    installation and no other. The interpreter is ``sys.executable`` as it is (a virtualenv's
    ``bin/python`` stays one, not the interpreter it links to). Without the launcher file (an
    unusual packaging) or an interpreter path, the console script is used: :func:`console_script`.
    """
    if sys.executable and LAUNCHER.is_file():
        return [sys.executable, *LAUNCHER_FLAGS, str(LAUNCHER.absolute())]
    return console_script()


def console_script() -> list[str]:
    """This installation's ``volunteer`` console script, by absolute path and whatever PATH says.

    A harness started from a desktop launcher has no shell PATH, and a ``volunteer`` found on PATH
    may belong to another installation, so the script is taken from this interpreter's scripts
    folder (``<prefix>/bin``; the path is not resolved, so a virtualenv's own ``bin`` stays in it).
    It is the fast entry (:mod:`pipeline.entry`); ``python -m pipeline`` (the click path, about
    20 ms slower per prompt) is only used for an installation that has no console script.
    """
    script = Path(sysconfig.get_path("scripts")) / "volunteer"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    beside = Path(sys.executable).parent / "volunteer"  # an interpreter whose scheme points elsewhere
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside.absolute())]
    return [sys.executable, "-m", "pipeline"]


def warm_bytecode() -> int:
    """Write the byte-code cache of every module the hook process loads; how many were written.

    The interpreter would write it on the first prompt (``-I`` ignores ``PYTHONDONTWRITEBYTECODE``),
    but only where it may write, and that first prompt would pay the compilation (~20 ms). An
    installation folder the user cannot write keeps whatever cache the installer made.
    """
    import py_compile

    package = LAUNCHER.parent
    hook = Path(__file__).parent
    sources = [package / "__init__.py", package / "corebuild.py", package / "entry.py", package / "jsonlite.py",
               package.parent / "topics" / "__init__.py", package.parent / "topics" / "delivery.py",
               *sorted(hook.glob("*.py"))]
    written = 0
    for source in sources:
        try:
            py_compile.compile(str(source), doraise=True)
        except (OSError, py_compile.PyCompileError):
            continue
        written += 1
    return written


def hook_command(harness: str, executable: list[str], env_vars: Mapping[str, str]) -> str:
    parts = [*executable, "hook", "user-prompt"]
    if harness != "claude-code":
        parts += ["--harness", harness]
    prefix = ["env", *(f"{k}={v}" for k, v in env_vars.items())] if env_vars else []
    return " ".join(shlex.quote(p) for p in [*prefix, *parts])


def is_our_command(command: Any) -> bool:
    """``…/volunteer hook user-prompt …``, ``… -m pipeline hook user-prompt …`` or
    ``… pipeline/launch.py hook user-prompt …`` (or the launcher's earlier place, ``pipeline/hook/launch.py``)."""
    if not isinstance(command, str):
        return False
    try:
        tokens = shlex.split(command)
    except ValueError:
        return False
    for i in range(1, len(tokens) - 1):
        if tokens[i] == "hook" and tokens[i + 1] == "user-prompt":
            before = tokens[i - 1]
            if Path(before).name == "volunteer" or (before == "pipeline" and i >= 2 and tokens[i - 2] == "-m"):
                return True
            if Path(before).parts[-2:] == ("pipeline", "launch.py"):
                return True
            if Path(before).parts[-3:] == ("pipeline", "hook", "launch.py"):  # where it was before
                return True
    return False


def _is_ours(entry: Any) -> bool:
    return isinstance(entry, dict) and is_our_command(entry.get("command"))


def _groups(settings: dict[str, Any], create: bool) -> list[Any] | None:
    hooks = settings.get("hooks")
    if hooks is None:
        if not create:
            return None
        hooks = settings["hooks"] = {}
    if not isinstance(hooks, dict):
        raise InstallError("'hooks' in the settings is not an object; fix it by hand first")
    groups = hooks.get(EVENT)
    if groups is None:
        if not create:
            return None
        groups = hooks[EVENT] = []
    if not isinstance(groups, list):
        raise InstallError(f"'hooks.{EVENT}' in the settings is not a list; fix it by hand first")
    return groups


def _remove_ours(groups: list[Any]) -> int:
    removed = 0
    for index in range(len(groups) - 1, -1, -1):
        group = groups[index]
        if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
            continue
        kept = [h for h in group["hooks"] if not _is_ours(h)]
        gone = len(group["hooks"]) - len(kept)
        if gone:
            removed += gone
            if kept:
                group["hooks"] = kept
            else:
                del groups[index]  # the group only held our hook
    return removed


def _ours(groups: list[Any]) -> list[dict[str, Any]]:
    return [h for g in groups if isinstance(g, dict) and isinstance(g.get("hooks"), list)
            for h in g["hooks"] if _is_ours(h)]


def install_into(settings: dict[str, Any], command: str, timeout_s: int = DEFAULT_TIMEOUT_S) -> bool:
    """Make ``settings`` hold exactly one hook entry of ours, with this command; True if changed."""
    groups = _groups(settings, create=True)
    assert groups is not None
    wanted = {"type": "command", "command": command, "timeout": timeout_s}
    if _ours(groups) == [wanted]:
        return False
    _remove_ours(groups)
    groups.append({"hooks": [wanted]})
    return True


def uninstall_from(settings: dict[str, Any]) -> int:
    """Remove our hook entries (and containers that only held them); returns how many."""
    groups = _groups(settings, create=False)
    if groups is None:
        return 0
    removed = _remove_ours(groups)
    if removed and not groups:
        hooks = settings["hooks"]
        del hooks[EVENT]
        if not hooks:
            del settings["hooks"]
    return removed


def installed_command(path: Path) -> str | None:
    """Our hook command in that settings file, if any (``None`` also when unreadable)."""
    if path.name == PLUGIN_NAME:
        try:
            return plugin_command(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return None
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
        groups = _groups(settings, create=False) if isinstance(settings, dict) else None
    except (OSError, ValueError, InstallError):
        return None
    ours = _ours(groups or [])
    return str(ours[0]["command"]) if ours else None


def _load(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", {}
    except OSError as exc:
        raise InstallError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not text.strip():
        return text, {}
    try:
        settings = json.loads(text)
    except ValueError as exc:
        raise InstallError(f"{path} is not valid JSON ({exc}); fix or move it, then run again") from None
    if not isinstance(settings, dict):
        raise InstallError(f"{path} does not hold a JSON object; fix or move it, then run again")
    return text, settings


def _indent_of(text: str) -> int | str:
    """The file's indentation (first indented line), so a rewrite keeps its look; 2 by default."""
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            lead = line[: len(line) - len(stripped)]
            return "\t" if lead.startswith("\t") else len(lead)
    return 2


def _dump(settings: dict[str, Any], like: str = "") -> str:
    return json.dumps(settings, indent=_indent_of(like), ensure_ascii=False) + "\n"


def _plugin_plan(path: Path, uninstall: bool, command: str, timeout_s: int) -> Plan:
    try:
        before = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        before = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"cannot read {path}: {exc}") from None
    if before and plugin_command(before) is None:
        raise InstallError(f"{path} is not the volunteer-stream plugin; move it away, then run again")
    if uninstall:
        if not before:
            return Plan(path, before, before, False, f"no volunteer plugin at {path}; nothing to remove")
        return Plan(path, before, "", True, f"removed the volunteer opencode plugin {path}", delete=True)
    after = plugin_text(command, timeout_s)
    if after == before:
        return Plan(path, before, before, False, f"the volunteer opencode plugin is already installed at {path}")
    return Plan(path, before, after, True, f"installed the volunteer opencode plugin at {path}")


def plan(path: Path, *, uninstall: bool, command: str = "", timeout_s: int = DEFAULT_TIMEOUT_S) -> Plan:
    if path.name == PLUGIN_NAME:
        return _plugin_plan(path, uninstall, command, timeout_s)
    before, settings = _load(path)
    if uninstall:
        removed = uninstall_from(settings)
        if not removed:
            return Plan(path, before, before, False, f"no volunteer hook in {path}; nothing to remove")
        return Plan(path, before, _dump(settings, before), True, f"removed the volunteer {EVENT} hook from {path}")
    if not install_into(settings, command, timeout_s):
        return Plan(path, before, before, False, f"the volunteer {EVENT} hook is already installed in {path}")
    return Plan(path, before, _dump(settings, before), True, f"installed the volunteer {EVENT} hook in {path}")


def write_text_atomically(path: Path, text: str) -> None:
    """Replace the file's content in one step, keeping its mode; a symlink stays a symlink.

    The new content goes to a temporary file beside the symlink's *target*, which then replaces the
    target: settings kept in a dotfiles repository and linked into place stay linked.
    """
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o600
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        raise InstallError(f"cannot write {path}: {exc.strerror or exc}") from None


def apply(p: Plan) -> Path | None:
    """Write the plan atomically; the previous file is kept as ``<name>.bak`` (returned)."""
    if not p.changed:
        return None
    path = p.path
    backup: Path | None = None
    if path.exists():
        backup = path.with_name(path.name + ".bak")
        try:
            shutil.copy2(path, backup)  # follows a symlink: the backup holds the content
        except OSError as exc:
            raise InstallError(f"cannot keep a backup of {path}: {exc.strerror or exc}") from None
    if p.delete:
        try:
            path.unlink()
        except OSError as exc:
            raise InstallError(f"cannot remove {path}: {exc.strerror or exc}") from None
        return backup
    write_text_atomically(path, p.after)
    return backup
