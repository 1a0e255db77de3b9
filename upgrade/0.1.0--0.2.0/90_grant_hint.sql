-- grant_queue / revoke_queue of a queue that does not exist: 42704 with a
-- hint, as every other call says it (restated from schema/90_security.sql)
CREATE OR REPLACE FUNCTION queue._grant_target(p_queue text, p_role name, p_access text,
                                    OUT queue_name text, OUT grantee oid)
RETURNS record LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
BEGIN
    queue_name := queue._check_name(p_queue);
    IF p_role IS NULL THEN
        RAISE EXCEPTION 'role must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_access IS NULL THEN
        RAISE EXCEPTION 'access must not be null' USING ERRCODE = 'null_value_not_allowed',
            HINT = 'Valid access kinds are ''producer'', ''worker'' and ''reader''.';
    END IF;
    IF p_access NOT IN ('producer', 'worker', 'reader') THEN
        RAISE EXCEPTION 'invalid access "%"', p_access
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Valid access kinds are ''producer'', ''worker'' and ''reader''.';
    END IF;
    PERFORM 1 FROM queue.queue_config c WHERE c.queue_name = _grant_target.queue_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" does not exist', _grant_target.queue_name
            USING ERRCODE = 'undefined_object',
                  HINT = format('Create it with queue.create_queue(%L).', _grant_target.queue_name);
    END IF;
    SELECT r.oid INTO grantee FROM pg_catalog.pg_roles r WHERE r.rolname = p_role;
    IF grantee IS NULL THEN
        RAISE EXCEPTION 'role "%" does not exist', p_role
            USING ERRCODE = 'undefined_object',
                  HINT = 'Grant queue access to an existing login or group role.';
    END IF;
END
$$;
COMMENT ON FUNCTION queue._grant_target(text, name, text)
    IS 'Validates the arguments of grant_queue / revoke_queue and locks the queue''s settings row';
