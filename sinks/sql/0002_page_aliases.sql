-- gbrain-compatible alias table (docs/reference-behaviour.md §1.3). Deliberately not unique on (source_id, alias_norm):
-- two pages may claim one alias; ambiguity is settled when resolving.
-- Guarded rather than IF NOT EXISTS: a role without CREATE on the schema can still re-run it.
DO $$ BEGIN
  IF to_regclass('page_aliases') IS NULL THEN
    CREATE TABLE page_aliases (
      id         BIGSERIAL   PRIMARY KEY,
      source_id  TEXT        NOT NULL,
      alias_norm TEXT        NOT NULL,
      slug       TEXT        NOT NULL,
      created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
      CONSTRAINT page_aliases_uniq UNIQUE (source_id, alias_norm, slug)
    );
  END IF;
END $$;
DO $$ BEGIN
  IF to_regclass('page_aliases_lookup_idx') IS NULL THEN
    CREATE INDEX page_aliases_lookup_idx ON page_aliases (source_id, alias_norm);
  END IF;
END $$;
DO $$ BEGIN
  IF to_regclass('page_aliases_slug_idx') IS NULL THEN
    CREATE INDEX page_aliases_slug_idx ON page_aliases (source_id, slug);
  END IF;
END $$;
