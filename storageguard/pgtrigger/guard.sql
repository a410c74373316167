-- The guard's objects in its private schema. Install substitutes:
--   @private@  the private schema (quoted identifier)
--   @fence@    pgfence's table, schema-qualified and quoted
--   @fenceschema@ the fence table's schema (quoted identifier)
--   @crypto@   the schema of the pgcrypto extension (quoted identifier)
--   @maxterm@  the highest valid term (epoch.MaxTerm)
--   @maxtoken@ the longest token in bytes (epoch.MaxTokenLen)
--   @maxname@  the longest name in bytes (epoch.MaxNameLen)
--   @lockshared@, @lockexclusive@ the advisory lock of fence row f, shared
--              or exclusive, taken in the select list of the statement
--              that locks the row (pgproto: a raise's turn)
--   @durable@  synchronous_commit on for the rest of the transaction
--              (pgproto.Durable: a raise is durable when acknowledged)
-- Every function pins search_path to pg_catalog, pg_temp and names every
-- other object with its schema, so no object a session creates (in pg_temp
-- or elsewhere) can stand in for one of these.

-- verify turns a token into an epoch, as package epoch's Verify does, under
-- the HMAC keys of cluster, chosen by the token's key ID (and, with
-- allow_plain, accepting the unsigned text form). code is NULL for an authentic, well-formed token, else one of the
-- guard's SQLSTATEs (TF001 no token, TF002 malformed, TF003 unsigned, TF004
-- bad signature) with why in msg. It never raises for any input.
CREATE OR REPLACE FUNCTION @private@.verify(
  token text, want_cluster text, allow_plain boolean,
  OUT code text, OUT msg text, OUT cluster text, OUT term bigint, OUT leader text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  rest text;
  alg text;
  body text;
  sig text;
  i int;
  good boolean;
  kid text;
  digits text;
BEGIN
  IF token IS NULL OR token = '' THEN
    code := 'TF001'; msg := 'no token'; RETURN;
  END IF;
  IF octet_length(token) > @maxtoken@ THEN
    code := 'TF002'; msg := format('token is %s bytes, more than %s', octet_length(token), @maxtoken@); RETURN;
  END IF;
  IF left(token, 4) = 'tf1:' THEN
    rest := substr(token, 5);
    i := strpos(rest, ':');
    IF i <= 1 THEN
      code := 'TF002'; msg := 'token has no algorithm'; RETURN;
    END IF;
    alg := left(rest, i - 1);
    rest := substr(rest, i + 1);
    i := strpos(rest, ':');
    IF i = 0 THEN
      code := 'TF002'; msg := 'token has no signature'; RETURN;
    END IF;
    body := left(rest, i - 1);
    sig := substr(rest, i + 1);
    IF sig = '' OR strpos(sig, ':') > 0 THEN
      code := 'TF002'; msg := 'token has no signature'; RETURN;
    END IF;
    -- hs256 names a key without an ID, hs256.<key ID> the cluster's key of
    -- that ID (1..32 bytes of [A-Za-z0-9_-]).
    IF alg = 'hs256' THEN
      kid := '';
    ELSIF left(alg, 6) = 'hs256.' AND octet_length(alg) <= 6 + 32
          AND substr(alg, 7) COLLATE "C" OPERATOR(pg_catalog.~) '^[A-Za-z0-9_-]+$' THEN
      kid := substr(alg, 7);
    ELSE
      code := 'TF004';
      msg := format('token is signed with %s; the database verifies hs256 (HMAC-SHA256) only', quote_literal(left(alg, 40)));
      RETURN;
    END IF;
    -- The signature must be the unpadded base64url of HMAC-SHA256 over
    -- "tf1:" || alg || ":" || body, spelled exactly so (one spelling per
    -- MAC). Both sides are hashed before they are compared, so the time the
    -- comparison takes tells nothing about the expected signature.
    SELECT pg_catalog.sha256(pg_catalog.convert_to(sig, 'UTF8')) OPERATOR(pg_catalog.=)
           pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.rtrim(pg_catalog.translate(pg_catalog.encode(
             @crypto@.hmac(pg_catalog.convert_to('tf1:' || alg || ':' || body, 'UTF8'), k.key, 'sha256'::text),
             'base64'), '+/', '-_'), '='), 'UTF8'))
      INTO good
      FROM @private@.hmac_key k WHERE k.cluster = want_cluster AND k.key_id = kid;
    IF good IS NULL THEN
      code := 'TF004';
      msg := CASE WHEN kid = '' THEN format('no HMAC key without an ID for cluster %s', quote_literal(want_cluster))
                  ELSE format('no HMAC key with ID %s for cluster %s', quote_literal(kid), quote_literal(want_cluster)) END;
      RETURN;
    END IF;
    IF NOT good THEN
      code := 'TF004'; msg := 'bad signature'; RETURN;
    END IF;
  ELSIF strpos(token, ':') > 0 THEN
    code := 'TF002'; msg := 'unknown token version'; RETURN;
  ELSE
    body := token;
  END IF;
  -- The text form, canonical: names of [A-Za-z0-9._-], a decimal term
  -- without leading zeros. (A boolean match and split_part: regexp_match
  -- with groups and bounded repeats costs some 50 us a call.)
  IF NOT (body COLLATE "C" OPERATOR(pg_catalog.~) '^[A-Za-z0-9._-]+/(0|[1-9][0-9]*)/[A-Za-z0-9._-]+$') THEN
    code := 'TF002'; msg := format('%s is not cluster/term/leader', quote_literal(left(body, 200))); RETURN;
  END IF;
  cluster := pg_catalog.split_part(body, '/', 1);
  digits := pg_catalog.split_part(body, '/', 2);
  leader := pg_catalog.split_part(body, '/', 3);
  IF octet_length(cluster) > @maxname@ OR octet_length(leader) > @maxname@ THEN
    code := 'TF002'; msg := format('a name is longer than %s bytes', @maxname@);
    cluster := NULL; leader := NULL; RETURN;
  END IF;
  IF digits = '0' THEN
    code := 'TF002'; msg := 'term is 0'; cluster := NULL; leader := NULL; RETURN;
  END IF;
  IF octet_length(digits) > 20 OR digits::numeric > @maxterm@ THEN
    code := 'TF002'; msg := format('term %s is above the highest valid term %s', left(digits, 40), @maxterm@);
    cluster := NULL; leader := NULL; RETURN;
  END IF;
  IF alg IS NULL AND NOT allow_plain THEN
    code := 'TF003'; msg := format('unsigned token %s: this table accepts signed (hs256) tokens only', body);
    cluster := NULL; leader := NULL; RETURN;
  END IF;
  term := digits::bigint;
END
$fn$;

-- refuse raises the guard's refusal of an authentic epoch: foreign (TF005),
-- stale (TF006) or conflicting (TF007), naming both epochs.
CREATE OR REPLACE FUNCTION @private@.refuse(
  code text, what text, resource text, rel text, op text,
  p_cluster text, p_term bigint, p_leader text,
  h_cluster text, h_term bigint, h_leader text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  presented text := p_cluster || '/' || p_term || '/' || p_leader;
  highest text := h_cluster || '/' || h_term || '/' || h_leader;
BEGIN
  RAISE EXCEPTION USING
    ERRCODE = code,
    MESSAGE = format('termfence: %s for %s: presented %s, highest %s (%s on %s refused)',
                     what, '"' || resource || '"', presented, highest, op, rel),
    DETAIL = format(E'presented: %s\nhighest: %s\nresource: %s', presented, highest, resource),
    HINT = 'the leader that presented this token was deposed; only the current leader may write';
END
$fn$;

-- guard is the statement trigger. Arguments: resource, cluster, allow_plain
-- ('true' or 'false'), rels (the OIDs of the table it is on, first, and of
-- its partitions and children), approved (the OIDs of the triggers Install
-- approved on those and on the fence table). It refuses every statement
-- (TF009) while a trigger Install did not approve is on rels, and (on the
-- slow path, or at once where rels are more than one table) while weakness
-- finds anything else. Otherwise it admits the statement only if the transaction
-- presents (SET LOCAL termfence.token) an authentic token of cluster whose
-- epoch is not older than the resource's highest in @fence@, with pgfence's
-- lock protocol: the same epoch holds the fence row FOR SHARE until the
-- transaction ends, a newer one takes it FOR UPDATE (waiting for those
-- holders) and raises it.
CREATE OR REPLACE FUNCTION @private@.guard()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v record;
  res bytea;
  h_cluster text;
  h_term bigint;
  h_leader text;
  weak text;
  locked boolean;
BEGIN
  -- A row trigger is the guard against replicated writes (the apply
  -- worker fires no statement triggers): it makes the same checks, and
  -- returns the row (COALESCE(NEW, OLD), NULL for a statement) to let the
  -- write go on.
  IF TG_WHEN <> 'BEFORE' OR TG_NARGS <> 5 OR TG_LEVEL NOT IN ('STATEMENT', 'ROW') THEN
    RAISE EXCEPTION USING ERRCODE = 'TF009',
      MESSAGE = format('termfence: the guard on %I.%I must be a BEFORE trigger with 5 arguments; run Install again', TG_TABLE_SCHEMA, TG_TABLE_NAME);
  END IF;
  -- The fast path, for the common case: an authentic hs256 token of
  -- exactly the resource's highest epoch, decided by one query. Its inner
  -- part verifies the token without looking at the fence (OFFSET 0 keeps
  -- the planner from mixing the two, so how long a forged token takes does
  -- not depend on the fence): the token must be, byte for byte, "tf1:" ||
  -- alg || ":" || body || ":" || sig, with alg naming one of the cluster's
  -- keys and sig the canonical unpadded base64url of that key's HMAC over
  -- the part before it (so nothing can follow the signature). The outer
  -- part admits it only if body is exactly the epoch in the resource's
  -- fence row (valid and canonical, so the token's text form is too) and
  -- takes that row FOR SHARE: a row is locked only once every condition
  -- holds, and if a raise committed while the lock waited, the conditions
  -- are checked again on the raised row, fail, and the slow path refuses
  -- the token as stale. Anything else takes the slow path, which decides
  -- every case and is the reference: this path admits nothing it would
  -- refuse. (PL/pgSQL and the executor set up every expression and query
  -- again in each transaction: one query here, where the slow path has
  -- forty-odd expressions, is most of the guard's speed.)
  PERFORM @lockshared@
  FROM (SELECT pg_catalog.split_part(p.t, ':', 3) AS body
        FROM (SELECT pg_catalog.current_setting('termfence.token', true) AS t) p,
             LATERAL (SELECT pg_catalog.split_part(p.t, ':', 2) AS alg,
                             'tf1:' || pg_catalog.split_part(p.t, ':', 2) || ':' || pg_catalog.split_part(p.t, ':', 3) AS signed,
                             pg_catalog.split_part(p.t, ':', 4) AS sig) s,
             @private@.hmac_key k
        WHERE pg_catalog.octet_length(p.t) <= @maxtoken@
          AND p.t COLLATE "C" OPERATOR(pg_catalog.=) (s.signed || ':' || s.sig)
          AND k.cluster = TG_ARGV[1]
          AND s.alg COLLATE "C" OPERATOR(pg_catalog.=) CASE WHEN k.key_id = '' THEN 'hs256' ELSE 'hs256.' || k.key_id END
          -- Both sides hashed before they are compared: the time the
          -- comparison takes tells nothing about the expected signature.
          AND pg_catalog.sha256(pg_catalog.convert_to(s.sig, 'UTF8')) OPERATOR(pg_catalog.=)
              pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.rtrim(pg_catalog.translate(pg_catalog.encode(
                @crypto@.hmac(pg_catalog.convert_to(s.signed, 'UTF8'), k.key, 'sha256'::text),
                'base64'), '+/', '-_'), '='), 'UTF8'))
        OFFSET 0) presented,
       @fence@ f
  WHERE f.resource = pg_catalog.convert_to(TG_ARGV[0], 'UTF8')
    AND f.cluster = TG_ARGV[1]
    -- The row must hold an epoch termfence could have written: a term in
    -- 1..@maxterm@, names of 1..@maxname@ bytes of [A-Za-z0-9._-] (a row
    -- put in by hand is trusted no more than the full path would trust it).
    AND f.term >= 1 AND f.term <= @maxterm@
    AND pg_catalog.octet_length(f.cluster) <= @maxname@ AND pg_catalog.octet_length(f.leader) BETWEEN 1 AND @maxname@
    AND pg_catalog.translate(f.cluster || f.leader, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-', '') = ''
    AND presented.body COLLATE "C" OPERATOR(pg_catalog.=) (f.cluster || '/' || f.term || '/' || f.leader)
    -- No trigger that Install did not approve on the table or its
    -- partitions and children (see weakness; the rest of it, which costs
    -- more, below and on the slow path).
    AND TG_RELID OPERATOR(pg_catalog.=) (TG_ARGV[3]::pg_catalog.oid[])[1]
    AND NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_trigger t
      WHERE t.tgrelid OPERATOR(pg_catalog.=) ANY (TG_ARGV[3]::pg_catalog.oid[]) AND NOT t.tgisinternal
        AND t.tgfoid OPERATOR(pg_catalog.<>) ALL (ARRAY['@private@.guard()'::pg_catalog.regprocedure, '@private@.monotonic()'::pg_catalog.regprocedure]::pg_catalog.oid[])
        AND t.oid OPERATOR(pg_catalog.<>) ALL (TG_ARGV[4]::pg_catalog.oid[]))
  FOR SHARE OF f;
  IF FOUND THEN
    -- A trigger created after this check could still fire in this
    -- statement only on a relation the statement has not locked yet: a
    -- partition an INSERT routes rows to later. PostgreSQL locks the
    -- table the statement names before this trigger runs, and CREATE
    -- TRIGGER waits for that lock; for the other relations of the tree,
    -- nobody but the owner can create a trigger unless TRIGGER is granted
    -- on them, which is checked here. TRIGGER granted on a table alone is
    -- refused by the slow path (the next raise), by Install and by Audit.
    IF pg_catalog.strpos(TG_ARGV[3], ',') OPERATOR(pg_catalog.=) 0 THEN
      RETURN COALESCE(NEW, OLD);
    END IF;
    IF NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_class c, LATERAL pg_catalog.aclexplode(c.relacl) a
      WHERE c.oid OPERATOR(pg_catalog.=) ANY (TG_ARGV[3]::pg_catalog.oid[])
        AND a.privilege_type OPERATOR(pg_catalog.=) 'TRIGGER' AND a.grantee OPERATOR(pg_catalog.<>) c.relowner) THEN
      RETURN COALESCE(NEW, OLD);
    END IF;
  END IF;
  -- The slow path: refuse while something weakens the table, then verify
  -- and classify the token, then decide.
  IF TG_RELID OPERATOR(pg_catalog.<>) (TG_ARGV[3]::pg_catalog.oid[])[1] THEN
    RAISE EXCEPTION USING ERRCODE = 'TF009',
      MESSAGE = format('termfence: the guard on %I.%I was installed on another table (restored from a dump?); run Install again', TG_TABLE_SCHEMA, TG_TABLE_NAME);
  END IF;
  weak := @private@.weakness(TG_ARGV[3]::pg_catalog.oid[], TG_ARGV[4]::pg_catalog.oid[]);
  IF weak IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'TF009',
      MESSAGE = format('termfence: %s: a trigger fires in the writer''s transaction and writes under its token, so %s on %I.%I is refused until the owner removes it and runs Install again',
                       weak, TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME),
      HINT = 'REVOKE TRIGGER from roles other than the owner, drop triggers the owner did not create, and run pgtrigger.Install again; pgtrigger.Audit lists what weakens the table';
  END IF;
  v := @private@.verify(pg_catalog.current_setting('termfence.token', true), TG_ARGV[1], TG_ARGV[2]::boolean);
  IF v.code IS NOT NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = v.code,
      MESSAGE = format('termfence: %s for %s (%s on %I.%I refused)', v.msg, '"' || TG_ARGV[0] || '"', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME),
      HINT = 'present the current leader''s token first: SET LOCAL termfence.token = ''<token>''';
  END IF;
  IF v.cluster <> TG_ARGV[1] THEN
    RAISE EXCEPTION USING
      ERRCODE = 'TF005',
      MESSAGE = format('termfence: epoch %s for %s is from another cluster than %s (%s on %I.%I refused)',
                       v.cluster || '/' || v.term || '/' || v.leader, '"' || TG_ARGV[0] || '"', TG_ARGV[1], TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME),
      DETAIL = format(E'presented: %s\ncluster: %s\nresource: %s', v.cluster || '/' || v.term || '/' || v.leader, TG_ARGV[1], TG_ARGV[0]);
  END IF;
  res := pg_catalog.convert_to(TG_ARGV[0], 'UTF8');
  SELECT f.cluster, f.term, f.leader INTO h_cluster, h_term, h_leader FROM @fence@ f WHERE f.resource = res;
  IF FOUND THEN
    IF h_cluster <> v.cluster THEN
      PERFORM @private@.refuse('TF005', 'epoch from another cluster', TG_ARGV[0], format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP, v.cluster, v.term, v.leader, h_cluster, h_term, h_leader);
    ELSIF v.term < h_term THEN
      PERFORM @private@.refuse('TF006', 'stale epoch', TG_ARGV[0], format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP, v.cluster, v.term, v.leader, h_cluster, h_term, h_leader);
    ELSIF v.term = h_term THEN
      IF v.leader <> h_leader THEN
        PERFORM @private@.refuse('TF007', 'conflicting epoch', TG_ARGV[0], format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP, v.cluster, v.term, v.leader, h_cluster, h_term, h_leader);
      END IF;
      -- The same epoch: hold the row FOR SHARE, as pgfence does, and look
      -- again; a raise may have committed since the read above.
      SELECT f.cluster, f.term, f.leader, @lockshared@ INTO h_cluster, h_term, h_leader, locked FROM @fence@ f WHERE f.resource = res FOR SHARE;
      IF v.term < h_term THEN
        PERFORM @private@.refuse('TF006', 'stale epoch', TG_ARGV[0], format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP, v.cluster, v.term, v.leader, h_cluster, h_term, h_leader);
      END IF;
      RETURN COALESCE(NEW, OLD);
    END IF;
  END IF;
  -- A newer epoch (or the resource's first): raise under FOR UPDATE, which
  -- waits for the transactions holding the row FOR SHARE. Never take FOR
  -- SHARE first: two raisers upgrading would deadlock. (The raise commits
  -- with synchronous_commit on whatever the writer's session says: the
  -- fence table's trigger, monotonic, sees to that for every raise.)
  INSERT INTO @fence@ (resource, cluster, term, leader) VALUES (res, v.cluster, v.term, v.leader)
    ON CONFLICT (resource) DO NOTHING;
  SELECT f.cluster, f.term, f.leader, @lockexclusive@ INTO h_cluster, h_term, h_leader, locked FROM @fence@ f WHERE f.resource = res FOR UPDATE;
  IF h_cluster <> v.cluster THEN
    PERFORM @private@.refuse('TF005', 'epoch from another cluster', TG_ARGV[0], format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP, v.cluster, v.term, v.leader, h_cluster, h_term, h_leader);
  ELSIF v.term < h_term THEN
    PERFORM @private@.refuse('TF006', 'stale epoch', TG_ARGV[0], format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP, v.cluster, v.term, v.leader, h_cluster, h_term, h_leader);
  ELSIF v.term = h_term AND v.leader <> h_leader THEN
    PERFORM @private@.refuse('TF007', 'conflicting epoch', TG_ARGV[0], format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME), TG_OP, v.cluster, v.term, v.leader, h_cluster, h_term, h_leader);
  ELSIF v.term > h_term THEN
    UPDATE @fence@ f SET term = v.term, leader = v.leader WHERE f.resource = res;
  END IF;
  RETURN COALESCE(NEW, OLD);
END
$fn$;

-- monotonic keeps the fence table's high-water marks from going down: a
-- row may only be raised (a newer term, or the same row unchanged), never
-- lowered, moved to another cluster or resource, deleted or truncated. It
-- binds every role, the table's owner too (who can disable it). A raise or
-- a new row by a role other than the table's owner (or a member of it; the
-- guard runs as the owner) must also pass check_raise in the fence table's
-- schema: the epoch of the transaction's verified token, where the
-- cluster's key is in the database.
CREATE OR REPLACE FUNCTION @private@.monotonic()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    IF NOT (NEW.resource = OLD.resource AND NEW.cluster = OLD.cluster AND
            (NEW.term > OLD.term OR (NEW.term = OLD.term AND NEW.leader = OLD.leader))) THEN
      RAISE EXCEPTION USING ERRCODE = 'TF008',
        MESSAGE = format('termfence: the fence row of %s may only be raised: %s/%s/%s to %s/%s/%s refused',
                         quote_ident(pg_catalog.encode(OLD.resource, 'escape')), OLD.cluster, OLD.term, OLD.leader, NEW.cluster, NEW.term, NEW.leader);
    END IF;
    IF NEW.term = OLD.term THEN
      RETURN NEW; -- unchanged
    END IF;
  ELSIF TG_OP <> 'INSERT' THEN
    RAISE EXCEPTION USING ERRCODE = 'TF008',
      MESSAGE = format('termfence: %s on the fence table %s.%s refused: high-water marks are never removed', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME);
  END IF;
  -- A new row or a raise, by whoever writes it: it commits with
  -- synchronous_commit on, whatever the writer's session says.
  PERFORM @durable@;
  IF NOT pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) TG_RELID), 'MEMBER') THEN
    PERFORM @fenceschema@.termfence_check_raise(NEW.resource, NEW.cluster, NEW.term, NEW.leader);
  END IF;
  RETURN NEW;
END
$fn$;

-- termfence_check_raise decides whether a role other than the fence
-- table's owner may write the fence row p_resource = p_cluster/p_term/
-- p_leader (a new row or a raise). A resource that a guard checks belongs
-- to the guard's cluster (TF005 otherwise). Where the cluster's HMAC key is
-- in the database, the transaction must present a verified token (TF001..
-- TF004 as the guard) of exactly that epoch (TF010 otherwise). A cluster
-- without a stored key (Ed25519 tokens, which the database cannot verify)
-- is not checked further: its rows only rise. It lives beside the fence
-- table, where its writers can call it (EXECUTE to PUBLIC); calling it
-- directly reveals no more than whether a token is authentic.
CREATE OR REPLACE FUNCTION @fenceschema@.termfence_check_raise(
  p_resource bytea, p_cluster text, p_term bigint, p_leader text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  bound text;
  v record;
  shown text := p_cluster || '/' || p_term || '/' || p_leader;
  res text := pg_catalog.encode(p_resource, 'escape');
BEGIN
  SELECT r.cluster INTO bound FROM @private@.resource r WHERE r.resource OPERATOR(pg_catalog.=) p_resource;
  IF FOUND AND bound OPERATOR(pg_catalog.<>) p_cluster THEN
    RAISE EXCEPTION USING ERRCODE = 'TF005',
      MESSAGE = format('termfence: the fence row of %s belongs to cluster %s (a guarded resource): a row of %s refused',
                       '"' || res || '"', bound, shown),
      DETAIL = format(E'presented: %s\ncluster: %s\nresource: %s', shown, bound, res);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM @private@.hmac_key k WHERE k.cluster OPERATOR(pg_catalog.=) p_cluster) THEN
    RETURN;
  END IF;
  v := @private@.verify(pg_catalog.current_setting('termfence.token', true), p_cluster, false);
  IF v.code IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = v.code,
      MESSAGE = format('termfence: %s: the fence row of %s is raised to %s only under that epoch''s token', v.msg, '"' || res || '"', shown),
      HINT = 'present the epoch''s token in the transaction first: SET LOCAL termfence.token = ''<token>'' (pgfence: Options.Signer)';
  END IF;
  IF v.cluster OPERATOR(pg_catalog.<>) p_cluster OR v.term OPERATOR(pg_catalog.<>) p_term OR v.leader OPERATOR(pg_catalog.<>) p_leader THEN
    RAISE EXCEPTION USING ERRCODE = 'TF010',
      MESSAGE = format('termfence: the fence row of %s may be raised to %s only under that epoch''s token; the transaction presents %s',
                       '"' || res || '"', shown, v.cluster || '/' || v.term || '/' || v.leader),
      DETAIL = format(E'presented: %s\nrow: %s\nresource: %s', v.cluster || '/' || v.term || '/' || v.leader, shown, res);
  END IF;
END
$fn$;

-- weakness names the first thing that lets a role other than the owners
-- write guarded rows under another transaction's token, or NULL: the
-- TRIGGER privilege on rels (a guarded table and its partitions and
-- children) or on the fence table held by a role other than the
-- relation's owner, or a trigger on one of them that Install did not
-- approve (approved: the OIDs of the triggers it saw; its own, which call
-- the guard's functions, need no approval: nobody else may call those). A trigger fires in the writer's transaction, under its token:
-- a row trigger can rewrite the writer's rows or skip its DELETE, any
-- trigger can write rows of its own.
CREATE OR REPLACE FUNCTION @private@.weakness(rels oid[], approved oid[])
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
  WITH r(oid) AS (
    SELECT pg_catalog.unnest(rels)
    UNION ALL
    SELECT c.oid FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
      JOIN @private@.settings s ON n.nspname OPERATOR(pg_catalog.=) s.fence_schema
     WHERE c.relname OPERATOR(pg_catalog.=) 'termfence_fence')
  SELECT w FROM (
    SELECT pg_catalog.format('TRIGGER on %s is granted to %s', c.oid::pg_catalog.regclass,
             CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC' ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END) AS w
      FROM r JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.oid,
           LATERAL pg_catalog.aclexplode(c.relacl) a
     WHERE a.privilege_type OPERATOR(pg_catalog.=) 'TRIGGER' AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
    UNION ALL
    SELECT pg_catalog.format('trigger %I on %s (function %s, owned by %s) was not there when Install ran',
             t.tgname, t.tgrelid::pg_catalog.regclass, t.tgfoid::pg_catalog.regprocedure,
             pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(p.proowner)))
      FROM r JOIN pg_catalog.pg_trigger t ON t.tgrelid OPERATOR(pg_catalog.=) r.oid
           JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
     WHERE NOT t.tgisinternal
       AND t.tgfoid OPERATOR(pg_catalog.<>) ALL (ARRAY['@private@.guard()'::pg_catalog.regprocedure, '@private@.monotonic()'::pg_catalog.regprocedure]::pg_catalog.oid[])
       AND t.oid OPERATOR(pg_catalog.<>) ALL (approved)) x
  LIMIT 1
$fn$;

REVOKE ALL ON FUNCTION @private@.verify(text, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @private@.refuse(text, text, text, text, text, text, bigint, text, text, bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @private@.guard() FROM PUBLIC;
REVOKE ALL ON FUNCTION @private@.weakness(oid[], oid[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION @private@.monotonic() FROM PUBLIC;
REVOKE ALL ON FUNCTION @fenceschema@.termfence_check_raise(bytea, text, bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @fenceschema@.termfence_check_raise(bytea, text, bigint, text) TO PUBLIC;
