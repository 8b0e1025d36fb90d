"""Tuning by replay: labelled transcripts, threshold sweeps, metrics, plots and paced publishing.

The CLI entry points are ``volunteer replay --sweep/--score`` and ``volunteer replay --to-topic``
(see docs/tuning.md); the modules here hold the logic so the command stays a thin layer:

- :mod:`~pipeline.tuning.labels`: ``expected_slugs`` / ``acceptable_slugs`` on Turn records;
- :mod:`~pipeline.tuning.grid`: the ``--sweep`` grammar and the cartesian product of settings;
- :mod:`~pipeline.tuning.scoring`: micro-averaged push precision / recall, overall and per arm;
- :mod:`~pipeline.tuning.sweep`: one process's share of sessions through every setting;
- :mod:`~pipeline.tuning.parallel`: sessions partitioned over processes, results merged exactly;
- :mod:`~pipeline.tuning.report` and :mod:`~pipeline.tuning.plot`: table, JSON and HTML/SVG plot;
- :mod:`~pipeline.tuning.publish`: a transcript onto the ``turns`` topic at a chosen rate.
"""
