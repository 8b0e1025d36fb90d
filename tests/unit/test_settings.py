"""The settings' own environment reader against pydantic-settings' ``BaseSettings``, which it replaced.

:class:`pipeline.settings.Settings` reads ``VOLUNTEER_*`` itself so that no command imports
pydantic-settings (a quarter of a second of CPU at every start). The reference here is a
``BaseSettings`` twin built from the same fields and validators (``Settings.model_fields``, nothing
listed again) with the options the model used to have; for each environment both must give the same
values, or the same validation errors.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import ValidationError, create_model, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pipeline.settings import Settings, load_settings
from pipeline.settings_env import ENV_PREFIX, environment


class _Reference(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", populate_by_name=True)


def _reference_model() -> type[BaseSettings]:
    # NoDecode on every field: the old model let no value be decoded as JSON by the library (its
    # one list field carried NoDecode; the other fields are not "complex", where it changes nothing)
    fields: dict[str, Any] = {name: (Annotated[info.annotation, NoDecode], info)
                              for name, info in Settings.model_fields.items()}
    validators = {name: field_validator(*decorator.info.fields, mode=decorator.info.mode)(
                      decorator.func.__func__)  # type: ignore[attr-defined]  # the function under the classmethod
                  for name, decorator in Settings.__pydantic_decorators__.field_validators.items()}
    model: type[BaseSettings] = create_model(
        "Settings", __base__=_Reference, __validators__=validators, **fields)
    return model


REFERENCE = _reference_model()

ENVIRONMENTS: list[dict[str, str]] = [
    {},
    {"VOLUNTEER_BROKER": "tansu://127.0.0.1:1", "VOLUNTEER_WEB_PORT": "0", "VOLUNTEER_MAX_PAGES": "2"},
    {"volunteer_broker": "kafka://a:1,kafka://b:2", "Volunteer_Window_Turns": "8.5"},
    {"VOLUNTEER_BROKER": "kafka://first:1", "volunteer_broker": "kafka://second:2"},  # the later wins
    {"VOLUNTEER_EXCLUDE_SLUG_PREFIXES": "a/, b/ ,,"},
    {"VOLUNTEER_EXCLUDE_SLUG_PREFIXES": '["private/", "drafts/"]'},
    {"VOLUNTEER_EXCLUDE_SLUG_PREFIXES": "[not json"},
    {"VOLUNTEER_EXCLUDE_SLUG_PREFIXES": ""},
    {"VOLUNTEER_LEXICAL_ARMS": "0", "VOLUNTEER_REFLEX": "off", "VOLUNTEER_STATE_SEAL": "yes"},
    {"VOLUNTEER_LEXICAL_ARMS": "maybe"},
    {"VOLUNTEER_WEB_PORT": "70000"},
    {"VOLUNTEER_SINK_BATCH_SIZE": "0", "VOLUNTEER_TOPIC_PARTITIONS": "abc"},
    {"VOLUNTEER_MIN_CONFIDENCE": ""},
    {"VOLUNTEER_MIN_CONFIDENCE": "nan", "VOLUNTEER_MAX_PAGES": "1e9", "VOLUNTEER_FETCH_PAUSE_MS": "1001"},
    {"VOLUNTEER_STATE_DIR": "", "VOLUNTEER_HOOK_TOKEN": "x" * 40, "VOLUNTEER_LOG_LEVEL": "debug"},
    {"VOLUNTEER_PURGE_CRON": "17 3 * * *"},
    {"VOLUNTEER_PURGE_CRON": "*/5 * * * *"},
    {"VOLUNTEER_PURGE_CRON": "every day"},
    {"VOLUNTEER_NOT_A_SETTING": "1", "VOLUNTEER_": "x", "VOLUNTEERBROKER": "y", "BROKER": "z"},
]


def _outcome(build: Any) -> tuple[str, Any]:
    try:
        return "ok", repr(build().model_dump())  # repr: 4 and 4.0 differ
    except ValidationError as exc:
        return "error", (exc.title, exc.errors(include_url=False, include_context=False), str(exc))


def _set_only(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key in list(__import__("os").environ):
        if key.lower().startswith(ENV_PREFIX.lower()):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=lambda env: ",".join(env) or "empty")
def test_the_environment_reads_as_base_settings_read_it(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    _set_only(monkeypatch, env)
    assert _outcome(Settings) == _outcome(REFERENCE)


@pytest.mark.parametrize("env", ENVIRONMENTS[:4] + ENVIRONMENTS[10:12], ids=lambda env: ",".join(env) or "empty")
def test_values_given_win_over_the_environment_as_with_base_settings(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    _set_only(monkeypatch, env)
    given: dict[str, Any] = {"broker": "kafka://given:9", "web_port": 7000, "max_pages": None}
    assert _outcome(lambda: Settings(**given)) == _outcome(lambda: REFERENCE(**given))


def test_flags_win_over_the_environment_which_wins_over_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    _set_only(monkeypatch, {"VOLUNTEER_SOURCE": "team", "VOLUNTEER_WINDOW_TURNS": "6"})
    settings = load_settings(source="flag", max_pages=None)
    assert (settings.source, settings.window_turns, settings.max_pages, settings.sink_batch_size) == ("flag", 6.0, None, 500)
    with pytest.raises(ValidationError, match="web_port"):
        load_settings(web_port=-1)


def test_environment_matches_names_in_any_case_and_only_with_the_prefix() -> None:
    environ = {"volunteer_broker": "a", "VOLUNTEER_WEB_PORT": "1", "WEB_PORT": "2", "VOLUNTEER_NOPE": "3"}
    assert environment(["broker", "web_port", "data_dir"], environ) == {"broker": "a", "web_port": "1"}
