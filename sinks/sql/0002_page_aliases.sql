-- gbrain-compatible alias table (spec §1.3). Deliberately not unique on (source_id, alias_norm):
-- two pages may claim one alias; ambiguity is settled when resolving.
CREATE TABLE IF NOT EXISTS page_aliases (
  id         BIGSERIAL   PRIMARY KEY,
  source_id  TEXT        NOT NULL,
  alias_norm TEXT        NOT NULL,
  slug       TEXT        NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT page_aliases_uniq UNIQUE (source_id, alias_norm, slug)
);
CREATE INDEX IF NOT EXISTS page_aliases_lookup_idx ON page_aliases (source_id, alias_norm);
CREATE INDEX IF NOT EXISTS page_aliases_slug_idx ON page_aliases (source_id, slug);
