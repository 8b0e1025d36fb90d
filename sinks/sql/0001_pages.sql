-- gbrain-compatible brain pages (docs/reference-behaviour.md §1.2). Creates the table only when it is missing; on an
-- existing gbrain brain it adds, at most, the nullable/defaulted columns this service reads.
-- Guarded rather than IF NOT EXISTS: a role without CREATE on the schema can still re-run it.
DO $$ BEGIN
  IF to_regclass('pages') IS NULL THEN
    CREATE TABLE pages (
      id                SERIAL PRIMARY KEY,
      source_id         TEXT        NOT NULL DEFAULT 'default',
      slug              TEXT        NOT NULL,
      type              TEXT        NOT NULL,
      title             TEXT        NOT NULL,
      compiled_truth    TEXT        NOT NULL DEFAULT '',
      frontmatter       JSONB       NOT NULL DEFAULT '{}',
      deleted_at        TIMESTAMPTZ,
      last_retrieved_at TIMESTAMPTZ,
      created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
      updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
      CONSTRAINT pages_source_slug_key UNIQUE (source_id, slug)
    );
  END IF;
END $$;
-- Older gbrain brains may lack a column we read; add it (nullable or defaulted: no table rewrite).
-- Guarded so a brain whose pages table we do not own still migrates when nothing is missing.
DO $$
DECLARE
  col RECORD;
BEGIN
  FOR col IN
    SELECT * FROM (VALUES
      ('compiled_truth', 'TEXT NOT NULL DEFAULT '''''),
      ('frontmatter', 'JSONB NOT NULL DEFAULT ''{}'''),
      ('deleted_at', 'TIMESTAMPTZ'),
      ('last_retrieved_at', 'TIMESTAMPTZ')
    ) AS c(name, decl)
  LOOP
    IF NOT EXISTS (
      SELECT 1 FROM pg_attribute
       WHERE attrelid = 'pages'::regclass AND attname = col.name AND NOT attisdropped
    ) THEN
      EXECUTE format('ALTER TABLE pages ADD COLUMN %I ', col.name) || col.decl;
    END IF;
  END LOOP;
END
$$;
