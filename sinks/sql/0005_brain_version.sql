-- A cheap brain change counter for workers (sinks/brain_pg.py brain_version). Additive only: our
-- own table and function; the triggers are attached to pages / page_aliases from Python so a
-- database where we may not add triggers still migrates (workers then fall back to table stats).
-- Guarded rather than IF NOT EXISTS: a role without CREATE on the schema can still re-run it.
DO $$ BEGIN
  IF to_regclass('volunteer_stream_brain_version') IS NULL THEN
    CREATE TABLE volunteer_stream_brain_version (
      id      INTEGER PRIMARY KEY CHECK (id = 1),
      version BIGINT  NOT NULL DEFAULT 0
    );
  END IF;
END $$;
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM volunteer_stream_brain_version WHERE id = 1) THEN
    INSERT INTO volunteer_stream_brain_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
  END IF;
END $$;
