-- A brain as gbrain (v0.46.x) would have left it, written from the spec (§1.1-§1.3), not copied:
-- a sources table with the pages FK, extra gbrain-only columns, RLS switched on for the events
-- table, and rows of every shape, including op/reflex rows with NULL session_id/turn that repeat.
CREATE TABLE sources (
  id          TEXT PRIMARY KEY,
  name        TEXT NOT NULL UNIQUE,
  config      JSONB NOT NULL DEFAULT '{}'::jsonb
);
INSERT INTO sources (id, name) VALUES ('default', 'default'), ('team', 'team');

CREATE TABLE pages (
  id              SERIAL PRIMARY KEY,
  source_id       TEXT NOT NULL DEFAULT 'default' REFERENCES sources(id) ON DELETE CASCADE,
  slug            TEXT NOT NULL,
  type            TEXT NOT NULL,
  page_kind       TEXT NOT NULL DEFAULT 'markdown' CHECK (page_kind IN ('markdown','code','image')),
  title           TEXT NOT NULL,
  compiled_truth  TEXT NOT NULL DEFAULT '',
  timeline        TEXT NOT NULL DEFAULT '',
  frontmatter     JSONB NOT NULL DEFAULT '{}',
  content_hash    TEXT,
  emotional_weight REAL NOT NULL DEFAULT 0.0,
  created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
  deleted_at      TIMESTAMPTZ,
  last_retrieved_at TIMESTAMPTZ,
  CONSTRAINT pages_source_slug_key UNIQUE (source_id, slug)
);

CREATE TABLE page_aliases (
  id         BIGSERIAL PRIMARY KEY,
  source_id  TEXT NOT NULL,
  alias_norm TEXT NOT NULL,
  slug       TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT page_aliases_uniq UNIQUE (source_id, alias_norm, slug)
);
CREATE INDEX page_aliases_lookup_idx ON page_aliases (source_id, alias_norm);
CREATE INDEX page_aliases_slug_idx ON page_aliases (source_id, slug);

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
CREATE INDEX context_volunteer_events_src_time_idx ON context_volunteer_events (source_id, volunteered_at DESC);
CREATE INDEX context_volunteer_events_src_slug_idx ON context_volunteer_events (source_id, slug);
ALTER TABLE context_volunteer_events ENABLE ROW LEVEL SECURITY;

INSERT INTO pages (source_id, slug, type, title, compiled_truth, timeline, frontmatter, content_hash,
                   deleted_at, last_retrieved_at) VALUES
  ('default', 'people/alice-example', 'person', 'Alice Example', 'Alice is an early founder.', '- 2024: met',
   '{"aliases": ["Ally"], "summary": "Founder of things."}', 'h1', NULL, now() - interval '1 hour'),
  ('default', 'companies/widget-co', 'company', 'The Widget Company', E'---\nx: 1\n---\nWidgets.', '',
   '{}', 'h2', NULL, NULL),
  ('team', 'people/alice-example', 'person', 'Alice Example', 'Team copy.', '', '{}', 'h3', NULL, NULL),
  ('default', 'people/gone', 'person', 'Gone Person', 'Deleted.', '', '{}', 'h4', now() - interval '2 days', NULL);

INSERT INTO page_aliases (source_id, alias_norm, slug) VALUES
  ('default', 'ally', 'people/alice-example'),
  ('default', 'gone', 'people/gone'),
  ('default', 'orphan', 'people/no-such-page');

INSERT INTO context_volunteer_events
  (source_id, slug, confidence, match_arm, rationale, channel, session_id, turn, volunteered_at) VALUES
  ('default', 'people/alice-example', 0.9500000000000001, 'alias', 'alias match "Ally"', 'op', 's-1', 7, now() - interval '1 day'),
  ('default', 'people/alice-example', 0.9, 'alias', 'alias match "Alice Example"', 'reflex', NULL, NULL, now() - interval '2 days'),
  ('default', 'people/alice-example', 0.9, 'alias', 'alias match "Alice Example"', 'reflex', NULL, NULL, now() - interval '2 days'),
  ('default', 'companies/widget-co', 0.8, 'title', 'title match "The Widget Company"', 'claude-code', 'cc-1', NULL, now() - interval '3 days'),
  ('default', 'companies/widget-co', 0.8, 'title', 'title match "The Widget Company"', 'claude-code', 'cc-1', NULL, now() - interval '3 days'),
  ('team', 'people/alice-example', 0.8500000000000001, 'title', 'exact title match "Alice Example"', 'watch', 'watch-1-abc', 1, now() - interval '100 days');
