-- The volunteered-page log, exactly gbrain's migration v117 (docs/reference-behaviour.md §1.1): same columns, defaults and
-- index names, so gbrain's --stats, doctor and purge read our rows and we read theirs.
-- Guarded rather than IF NOT EXISTS: a role without CREATE on the schema can still re-run it.
DO $$ BEGIN
  IF to_regclass('context_volunteer_events') IS NULL THEN
    CREATE TABLE context_volunteer_events (
      id             BIGSERIAL PRIMARY KEY,
      source_id      TEXT NOT NULL,
      slug           TEXT NOT NULL,
      confidence     DOUBLE PRECISION NOT NULL,
      match_arm      TEXT NOT NULL,
      rationale      TEXT NOT NULL DEFAULT '',
      channel        TEXT NOT NULL DEFAULT 'op',
      session_id     TEXT,
      turn           INTEGER,
      volunteered_at TIMESTAMPTZ NOT NULL DEFAULT now()
    );
  END IF;
END $$;
DO $$ BEGIN
  IF to_regclass('context_volunteer_events_src_time_idx') IS NULL THEN
    CREATE INDEX context_volunteer_events_src_time_idx ON context_volunteer_events (source_id, volunteered_at DESC);
  END IF;
END $$;
DO $$ BEGIN
  IF to_regclass('context_volunteer_events_src_slug_idx') IS NULL THEN
    CREATE INDEX context_volunteer_events_src_slug_idx ON context_volunteer_events (source_id, slug);
  END IF;
END $$;
