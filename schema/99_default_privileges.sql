-- ======================================================================
-- Default privileges: where the installing superuser has them for new
-- objects (ALTER DEFAULT PRIVILEGES ... GRANT ... TO a role, or TO
-- PUBLIC), every table, sequence and function this script made was also
-- granted by them, so that role could write the tables and call every
-- function (drop_queue included).  Runs last, over every object of the
-- schema: takes back what the script's own objects were granted to roles
-- other than the owner and the four group roles.  Grants a DBA made after
-- an earlier install are not the script's (pg_init_privs does not list
-- them) and stay.  The partitions the sweep makes later are stripped where
-- they are made (queue._history_extend).
-- ======================================================================

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT o.kind, o.obj, a.grantee
          FROM (SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
                       c.oid::pg_catalog.regclass::pg_catalog.text, c.relacl, c.relowner,
                       'pg_catalog.pg_class'::pg_catalog.regclass, c.oid
                  FROM pg_catalog.pg_class c
                 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'queue'::pg_catalog.regnamespace
                   AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,v,m,f,S}'::pg_catalog."char"[])
                UNION ALL
                SELECT 'ROUTINE', p.oid::pg_catalog.regprocedure::pg_catalog.text, p.proacl, p.proowner,
                       'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid
                  FROM pg_catalog.pg_proc p
                 WHERE p.pronamespace OPERATOR(pg_catalog.=) 'queue'::pg_catalog.regnamespace)
               AS o(kind, obj, acl, owner, classoid, objoid)
          CROSS JOIN LATERAL pg_catalog.aclexplode(o.acl) a
          JOIN pg_catalog.pg_init_privs ip
            ON ip.classoid OPERATOR(pg_catalog.=) o.classoid
           AND ip.objoid OPERATOR(pg_catalog.=) o.objoid
           AND ip.objsubid OPERATOR(pg_catalog.=) 0
         WHERE a.grantee OPERATOR(pg_catalog.<>) o.owner
           -- PUBLIC (grantee 0) reads as '-'
           AND a.grantee::pg_catalog.regrole::pg_catalog.text OPERATOR(pg_catalog.<>)
               ALL ('{queue_admin,queue_producer,queue_worker,queue_reader}'::pg_catalog.text[])
           AND EXISTS (SELECT 1 FROM pg_catalog.aclexplode(ip.initprivs) i
                        WHERE i.grantee OPERATOR(pg_catalog.=) a.grantee)
         ORDER BY 1, 2, 3
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s', r.kind, r.obj,
                                  CASE WHEN r.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                       ELSE r.grantee::pg_catalog.regrole::pg_catalog.text END);
    END LOOP;
END
$$;
