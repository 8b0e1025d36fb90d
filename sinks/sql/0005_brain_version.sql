-- A cheap brain change counter for workers (sinks/brain_pg.py brain_version). Additive only: our
-- own table and function; the triggers are attached to pages / page_aliases from Python so a
-- database where we may not add triggers still migrates (workers then fall back to table stats).
CREATE TABLE IF NOT EXISTS volunteer_stream_brain_version (
  id      INTEGER PRIMARY KEY CHECK (id = 1),
  version BIGINT  NOT NULL DEFAULT 0
);
INSERT INTO volunteer_stream_brain_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

-- Bumps once per transaction. Fired as a deferred constraint trigger, i.e. at commit time: the
-- counter row is locked only for the last instant of a writer's transaction, so concurrent gbrain
-- writers never deadlock on it, and the new value becomes visible atomically with the page change.
CREATE OR REPLACE FUNCTION volunteer_stream_bump_brain_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('volunteer_stream.brain_bumped', true), '') <> txid_current()::text THEN
    UPDATE volunteer_stream_brain_version SET version = version + 1 WHERE id = 1;
    PERFORM set_config('volunteer_stream.brain_bumped', txid_current()::text, true);
  END IF;
  RETURN NULL;
END
$$;
