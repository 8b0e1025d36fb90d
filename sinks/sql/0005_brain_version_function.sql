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
