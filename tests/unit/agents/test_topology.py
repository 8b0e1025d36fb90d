"""docs/architecture.md, the topology declaration and the app built from it say the same thing.

The way tests/unit/test_config_docs.py holds docs/configuration.md to the settings: the table of
"Topology" must be :func:`pipeline.agents.topology.markdown_table`, its rows are read back and
compared with the declaration field by field (so a renderer that drifted would be caught too),
the picture must name every agent, topic and table, and a real Faust app built by ``StreamApp``
must have exactly the declared agents on the declared topics, and the declared table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.agents.brain_holder import BrainHolder
from pipeline.agents.commit_protocol import WindowCommit, WriteCommit
from pipeline.agents.statecrypt import StateCipher, new_key_text, parse_key
from pipeline.agents.topology import AGENTS, TABLES, default_topic, markdown_table, topic_fields
from pipeline.app import StreamApp
from pipeline.settings import load_settings

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "architecture.md"
SAMPLES = ROOT / "pipeline" / "samples"


def section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, flags=re.MULTILINE | re.DOTALL)
    assert match, f"docs/architecture.md has no section '## {title}'"
    return match.group(1)


def doc_table() -> list[str]:
    return [line for line in section("Topology").splitlines() if line.startswith("|")]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_the_doc_table_is_the_declaration() -> None:
    expected = markdown_table().splitlines()
    current = doc_table()
    if current != expected:
        first = next((i for i, (a, b) in enumerate(zip(current, expected, strict=False)) if a != b),
                     min(len(current), len(expected)))
        pytest.fail("docs/architecture.md, 'Topology', is stale: paste `python -m pipeline.agents.topology`. "
                    f"First difference at row {first + 1}:\n"
                    f"  committed: {current[first] if first < len(current) else '<end of table>'}\n"
                    f"  declared:  {expected[first] if first < len(expected) else '<end of table>'}")


def test_each_row_names_the_agent_its_topics_its_table_and_its_ack_rule() -> None:
    header, _rule, *rows = doc_table()
    assert cells(header)[0] == "agent" and cells(header)[-1] == "acknowledges a batch"
    assert [names(cells(row)[0]) for row in rows] == [[agent.name] for agent in AGENTS]
    for row, agent in zip(rows, AGENTS, strict=True):
        name, consumes, publishes, table, _batches, commit, ack = cells(row)
        assert names(consumes) == [default_topic(agent.input)], name
        assert names(publishes) == [default_topic(field) for field in agent.outputs], name
        assert names(table) == ([agent.table] if agent.table else []), name
        assert names(commit) == [agent.commit.__name__], name
        assert ack == agent.ack == agent.commit.ACK_RULE, name


def test_the_picture_names_every_agent_topic_and_table() -> None:
    picture = section("Data flow").split("```")[1]
    for agent in AGENTS:
        assert agent.label in picture, agent.label
    for field in topic_fields():
        assert re.search(rf"(?<![\w-]){re.escape(default_topic(field))}(?![\w-])", picture), field
    for table in TABLES:
        assert f"{table.name} table" in picture, table.name


def test_the_declaration_is_consistent() -> None:
    assert len({agent.name for agent in AGENTS}) == len(AGENTS)
    assert {agent.table for agent in AGENTS if agent.table} <= {table.name for table in TABLES}
    # the one agent that saves states commits with the window protocol; the writers with theirs
    for agent in AGENTS:
        assert issubclass(agent.commit, WindowCommit if agent.table else WriteCommit), agent.name
        assert agent.input not in agent.outputs, agent.name


def test_the_app_is_built_from_the_declaration(tmp_path: Path) -> None:
    settings = load_settings(broker="kafka://127.0.0.1:9", data_dir=str(tmp_path), topic_turns="t-in",
                             sink_batch_size=7)
    stream = StreamApp(settings, BrainHolder.from_directory(SAMPLES / "brain"), partitions=3,
                       state_cipher=StateCipher(parse_key(new_key_text())))
    assert set(stream.topics) == set(topic_fields())
    assert {field: topic.get_topic_name() for field, topic in stream.topics.items()} == {
        field: getattr(settings, field) for field in topic_fields()}
    agents = {agent.name: agent for agent in stream.app.agents.values()}
    assert sorted(agents) == sorted(spec.name for spec in AGENTS)
    for spec in AGENTS:
        assert agents[spec.name].channel.get_topic_name() == getattr(settings, spec.input), spec.name
    assert {spec.name for spec in TABLES} <= set(stream.app.tables)
    assert stream.table is stream.tables[TABLES[0].name]
    assert stream.table.partitions == 3
    sink = next(spec for spec in AGENTS if spec.input == "topic_volunteered")
    assert sink.batching.size(settings) == 7  # a setting, read when the agent starts


def test_each_agent_has_its_own_label(tmp_path: Path) -> None:
    """Faust names an agent in its logs and crash reports by its function: one name per agent."""
    settings = load_settings(broker="kafka://127.0.0.1:9", data_dir=str(tmp_path))
    stream = StreamApp(settings, BrainHolder.from_directory(SAMPLES / "brain"), partitions=1,
                       state_cipher=StateCipher(parse_key(new_key_text())))
    labels = {agent.name: agent.label for agent in stream.app.agents.values()}
    assert len(set(labels.values())) == len(AGENTS)
    for spec in AGENTS:
        assert spec.name.replace("-", "_") in labels[spec.name]
