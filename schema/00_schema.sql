-- Schema, sequences and the shared vocabulary of the extension.
--
-- Every table that holds per-item rows carries queue_name as the first
-- column of its primary key, so the extension stays distributable by queue
-- (see the scale-out notes in README.md).  Item ids and lease tokens come
-- from two global sequences: unique per queue, roughly increasing.

-- The schema must be a superuser's alone.  PostgreSQL creates it for the
-- extension, owned by the installing superuser, unless it exists already;
-- an existing one is used as it is.  Its owner could rename it and put
-- look-alike tables behind the names the SECURITY DEFINER functions use
-- (their triggers would then run as the superuser), and a role that may
-- create in it could add overloads of the API functions (hold(text, int))
-- that callers' calls resolve to.  Refuse such a schema before anything
-- is created in it.
DO $$
DECLARE
    v_what text;
    v_role name;
BEGIN
    SELECT r.rolname INTO v_role
      FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) n.nspowner
     WHERE n.nspname OPERATOR(pg_catalog.=) 'queue' AND NOT r.rolsuper;
    IF FOUND THEN
        RAISE EXCEPTION 'schema "queue" belongs to role "%", which is not a superuser', v_role
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'The owner of the extension''s schema could replace what its functions run.',
                  HINT = 'Drop the schema, or give it to a superuser with ALTER SCHEMA queue OWNER TO, then create the extension again.';
    END IF;
    SELECT r.rolname INTO v_role
      FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a, pg_catalog.pg_roles r
     WHERE n.nspname OPERATOR(pg_catalog.=) 'queue' AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
       AND r.oid OPERATOR(pg_catalog.=) a.grantee AND NOT r.rolsuper
     ORDER BY r.rolname LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'role "%" may create objects in schema "queue"', v_role
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Objects that role puts in the extension''s schema could stand in for the extension''s own.',
                  HINT = 'Revoke it with REVOKE CREATE ON SCHEMA queue FROM, then create the extension again.';
    END IF;
    SELECT o.what, r.rolname INTO v_what, v_role
      FROM (SELECT 'relation ' OPERATOR(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text, c.relowner
              FROM pg_catalog.pg_class c WHERE c.relnamespace OPERATOR(pg_catalog.=) 'queue'::pg_catalog.regnamespace
            UNION ALL
            SELECT 'function ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text, p.proowner
              FROM pg_catalog.pg_proc p WHERE p.pronamespace OPERATOR(pg_catalog.=) 'queue'::pg_catalog.regnamespace
            UNION ALL
            SELECT 'type ' OPERATOR(pg_catalog.||) t.oid::pg_catalog.regtype::pg_catalog.text, t.typowner
              FROM pg_catalog.pg_type t WHERE t.typnamespace OPERATOR(pg_catalog.=) 'queue'::pg_catalog.regnamespace
            UNION ALL
            SELECT 'operator ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regoperator::pg_catalog.text, p.oprowner
              FROM pg_catalog.pg_operator p WHERE p.oprnamespace OPERATOR(pg_catalog.=) 'queue'::pg_catalog.regnamespace)
           AS o(what, owner)
      JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) o.owner
     WHERE NOT r.rolsuper
     ORDER BY o.what LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'schema "queue" holds % of role "%", which is not a superuser', v_what, v_role
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'An object of another role in the extension''s schema could stand in for the extension''s own.',
                  HINT = 'Drop that object, or the schema, then create the extension again.';
    END IF;
END
$$;

CREATE SEQUENCE queue.item_id_seq;
CREATE SEQUENCE queue.lease_token_seq;
CREATE SEQUENCE queue.event_id_seq;
CREATE SEQUENCE queue.failure_id_seq;
CREATE SEQUENCE queue.alert_id_seq;
CREATE SEQUENCE queue.maintenance_id_seq;
