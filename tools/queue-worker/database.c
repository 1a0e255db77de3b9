/*-------------------------------------------------------------------------
 *
 * database.c
 *		queue-worker's database side: connection, claims, leases, reports.
 *
 * One libpq connection, used synchronously from the main loop.  When it
 * breaks, run_query drops it and every caller sees Q_RETRY; the loop
 * calls try_connect later, with a growing delay, which LISTENs and
 * registers the worker again.  Reports are sent with the item's lease
 * token, so a report repeated after a reconnect is a harmless no-op.
 *
 * Every SQL statement is a constant string run with PQexecParams; values
 * travel only as parameters.  The one exception is LISTEN, whose channel
 * is an identifier: it is built from the validated queue name and quoted
 * with PQescapeIdentifier.
 *
 * This file records what the server said on the item (lease lost,
 * report accepted) and frees reported items; it starts no process.
 *
 *-------------------------------------------------------------------------
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sanitize.h"
#include "worker.h"

PGconn	   *conn;
static double next_connect;		/* when to try to reconnect */
static double reconnect_delay = RECONNECT_MIN;

/*
 * The registration the worker owes the server: at start, with restart (it
 * ends the leases an earlier process held under the name), and after each
 * reconnect, without.  It stays owed through a "not now" or a lost
 * connection and is sent again (ensure_registered).
 */
static bool register_due;
static bool restart_due = true; /* the start's restart is not made yet */
static double register_retry;	/* when to send it again */

static PGconn *open_connection(char *errbuf, size_t errlen);
static void start_listening(void);
static QStatus register_worker(bool restart);
static void end_refused(Item *it, const char *sqlstate);
static void extension_refused(Item *it, const char *what);

/* characters of stdout kept when a result is larger than the server takes */
#define RESULT_CUT_CHARS "1024"

/*
 * Errors that say "not now" rather than "no": a serialization failure or
 * deadlock (class 40), a lack of resources (53), and a statement that
 * waited past lock_timeout (55P03) or statement_timeout, or was cancelled
 * (57014).  The same statement may succeed when sent again.
 */
static bool
sqlstate_transient(const char *state)
{
	return !strncmp(state, "40", 2) || !strncmp(state, "53", 2) ||
		!strcmp(state, "55P03") || !strcmp(state, "57014");
}

/*
 * Run one parameterized statement.  On success returns Q_OK and the
 * result in *res (caller clears it).  Connection failures return Q_RETRY
 * and drop the connection; transient server states (sqlstate_transient)
 * return Q_RETRY and keep it; other errors are logged and return Q_FAIL,
 * with the SQLSTATE copied to sqlstate.
 */
QStatus
run_query(const char *what, const char *sql, int nparams,
		  const char *const *values, PGresult **res, char *sqlstate)
{
	PGresult   *r;
	ExecStatusType st;
	const char *state;

	if (res)
		*res = NULL;
	if (sqlstate)
		sqlstate[0] = '\0';
	if (conn == NULL)
		return Q_RETRY;

	r = PQexecParams(conn, sql, nparams, NULL, values, NULL, NULL, 0);
	st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
	{
		if (res)
			*res = r;
		else
			PQclear(r);
		return Q_OK;
	}

	state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if (sqlstate && state)
		snprintf(sqlstate, 6, "%s", state);
	if (PQstatus(conn) == CONNECTION_BAD || state == NULL ||
		!strncmp(state, "08", 2) || !strncmp(state, "57P", 3) ||
		sqlstate_transient(state))
	{
		char		msg[512];
		/* NB: decided before PQclear, which frees state */
		bool		lost = PQstatus(conn) == CONNECTION_BAD || state == NULL ||
			!strncmp(state, "08", 2) || !strncmp(state, "57P", 3);

		snprintf(msg, sizeof(msg), "%s: %s", what,
				 r ? PQresultErrorMessage(r) : PQerrorMessage(conn));
		msg[strcspn(msg, "\n")] = '\0';
		if (r)
			PQclear(r);
		if (lost)
			disconnect(msg);
		else
			log_msg("%s (will retry)", msg);
		return Q_RETRY;
	}

	{
		const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
		const char *h = PQresultErrorField(r, PG_DIAG_MESSAGE_HINT);

		log_msg("%s failed: %s (SQLSTATE %s)%s%s", what, m ? m : "?",
				state, h ? "; hint: " : "", h ? h : "");
	}
	PQclear(r);
	return Q_FAIL;
}

void
disconnect(const char *why)
{
	if (conn == NULL)
		return;
	log_msg("lost the database connection (%s); reconnecting in %.1f s",
			why, reconnect_delay);
	PQfinish(conn);
	conn = NULL;
	next_connect = now_mono() + reconnect_delay;
	reconnect_delay = fmin(reconnect_delay * 2, RECONNECT_MAX);
}

/* Server notices go to the log like everything else. */
static void
notice_to_log(void *arg, const char *message)
{
	char		msg[512];

	(void) arg;
	snprintf(msg, sizeof(msg), "%s", message);
	msg[strcspn(msg, "\n")] = '\0';
	log_msg("server: %s", msg);
}

/*
 * Connect.  NB: client_encoding comes after dbname, so neither --dsn nor
 * PGCLIENTENCODING overrides it: payloads go to commands as JSON, which is
 * UTF-8, and their output is read as UTF-8 (sanitize_utf8).
 */
static PGconn *
open_connection(char *errbuf, size_t errlen)
{
	const char *keys[] = {"connect_timeout", "dbname", "client_encoding",
	"fallback_application_name", NULL};
	const char *vals[] = {"10", opt.dsn, "UTF8", "queue-worker", NULL};
	PGconn	   *c = PQconnectdbParams(keys, vals, 1);

	if (c == NULL || PQstatus(c) != CONNECTION_OK)
	{
		const char *m = c ? PQerrorMessage(c) : "out of memory";

		/* the server's text, shown on a terminal at start */
		term_sanitize(errbuf, errlen, m, strcspn(m, "\n"));
		if (c)
			PQfinish(c);
		return NULL;
	}
	PQsetNoticeProcessor(c, notice_to_log, NULL);
	return c;
}

/*
 * Is this connection handed to another server session between
 * transactions, as PgBouncer does in transaction pooling?  Then three
 * statements in a row may run in different backends.  (With one server
 * connection in the pool this cannot tell; --no-listen is the sure way.)
 */
static bool
connection_is_pooled(void)
{
	char		first[16] = "";

	for (int i = 0; i < 3; i++)
	{
		PGresult   *res;

		if (run_query("checking for a pooler", "SELECT pg_catalog.pg_backend_pid()::text",
					  0, NULL, &res, NULL) != Q_OK)
			return false;
		if (i == 0)
			snprintf(first, sizeof(first), "%s", PQgetvalue(res, 0, 0));
		else if (strcmp(first, PQgetvalue(res, 0, 0)) != 0)
		{
			PQclear(res);
			return true;
		}
		PQclear(res);
	}
	return false;
}

/* LISTEN on queue_<name>; see the file header for why this is safe. */
static void
start_listening(void)
{
	char		channel[64];
	char	   *ident;
	char		sql[128];
	PGresult   *r;

	if (!opt.listen || conn == NULL)
		return;
	if (connection_is_pooled())
	{
		log_msg("this connection moves between server sessions (a pooler in transaction mode, "
				"such as PgBouncer): LISTEN needs a direct connection or session pooling, so this "
				"worker polls every %.1f s instead (--no-listen says so without checking)", opt.poll);
		opt.listen = false;
		return;
	}
	snprintf(channel, sizeof(channel), "queue_%s", opt.queue);
	ident = PQescapeIdentifier(conn, channel, strlen(channel));
	if (ident == NULL)
		return;
	snprintf(sql, sizeof(sql), "LISTEN %s", ident);
	PQfreemem(ident);
	r = PQexec(conn, sql);
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
	{
		char		msg[256];

		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(conn));
		msg[strcspn(msg, "\n")] = '\0';
		log_msg("LISTEN failed (%s): LISTEN needs a direct connection or session pooling, "
				"so this worker polls every %.1f s instead", msg, opt.poll);
	}
	PQclear(r);
}

/*
 * What this server's register_worker accepts: labels (capability routing)
 * and restart arrived after 0.2.0's first releases, so the worker asks
 * pg_proc once at start and uses them when they are there.
 */
static bool server_has_labels;
static bool server_has_restart;

static void
detect_register_args(void)
{
	PGresult   *res;

	if (run_query("looking up register_worker",
				  "SELECT coalesce(bool_or('labels' = ANY (p.proargnames)), false),"
				  " coalesce(bool_or('restart' = ANY (p.proargnames)), false)"
				  " FROM pg_catalog.pg_proc p"
				  " WHERE p.proname = 'register_worker'"
				  "   AND p.pronamespace = 'queue'::pg_catalog.regnamespace",
				  0, NULL, &res, NULL) != Q_OK)
		return;
	server_has_labels = PQgetvalue(res, 0, 0)[0] == 't';
	server_has_restart = PQgetvalue(res, 0, 1)[0] == 't';
	PQclear(res);
	if (opt.labels && !server_has_labels)
	{
		fprintf(stderr, "%s: this database's queue extension does not know worker labels\n"
				"Update the extension (ALTER EXTENSION queue UPDATE), or run without --labels.\n",
				progname);
		exit(1);
	}
}

/*
 * Register the worker.  At start (restart true) every lease still held
 * under this name ends at once, so a restarted bot's items come back now
 * instead of after their lease; after a reconnect the same process still
 * holds its items, so it only registers again.  Returns how the statement
 * went; Q_RETRY leaves the registration to be sent again.
 */
static QStatus
register_worker(bool restart)
{
	/*
	 * $5 labels as "a,b", $6 restart; constant texts, values as parameters.
	 * The first column counts the leases held under the name as the
	 * statement starts (its snapshot does not see what the call ends).
	 */
#define HELD "SELECT (SELECT pg_catalog.count(*) FROM queue.items i" \
		" WHERE i.worker = $1 AND i.state = 'processing'), "
	static const char *const sql[2][2] = {
		{HELD "queue.register_worker($1, ARRAY[$2]::text[], $3::int, $4::jsonb)",
		 HELD "queue.register_worker($1, ARRAY[$2]::text[], $3::int, $4::jsonb,"
		 " restart => $5::boolean)"},
		{HELD "queue.register_worker($1, ARRAY[$2]::text[], $3::int, $4::jsonb,"
		 " labels => pg_catalog.string_to_array($5, ','))",
		 HELD "queue.register_worker($1, ARRAY[$2]::text[], $3::int, $4::jsonb,"
		 " labels => pg_catalog.string_to_array($5, ','), restart => $6::boolean)"}
	};
#undef HELD
	char		cap[16];
	char		info[512];
	char		host[128] = "";
	const char *vals[6];
	int			nvals = 4;
	bool		use_labels = opt.labels != NULL && server_has_labels;
	bool		use_restart = restart && server_has_restart;
	PGresult   *res;
	char		sqlstate[6];
	QStatus		qs;

	gethostname(host, sizeof(host) - 1);
	sanitize_utf8(host, strlen(host));
	/* capacity: every item this worker may hold, running or waiting */
	snprintf(cap, sizeof(cap), "%d", nitems);
	/* host names are [A-Za-z0-9.-]; the rest are ours */
	snprintf(info, sizeof(info),
			 "{\"program\": \"queue-worker\", \"version\": \"%s\", \"host\": \"%s\", \"pid\": %d}",
			 QW_VERSION, strpbrk(host, "\"\\") ? "?" : host, (int) getpid());
	vals[0] = worker_name;
	vals[1] = opt.queue;
	vals[2] = cap;
	vals[3] = info;
	if (use_labels)
		vals[nvals++] = opt.labels;
	if (use_restart)
		vals[nvals++] = "true";
	qs = run_query("register_worker", sql[use_labels][use_restart], nvals, vals, &res, sqlstate);
	if (qs == Q_OK)
	{
		long		held = atol(PQgetvalue(res, 0, 0));

		PQclear(res);
		if (use_restart && held > 0)
			log_msg("registered; ended %ld lease%s an earlier process held under this name "
					"(attempt counted, error \"worker restarted\")", held, held == 1 ? "" : "s");
	}
	else if (qs == Q_FAIL && restart && !strcmp(sqlstate, "42501"))
	{
		/*
		 * The name is another role's (running under it would mix two bots),
		 * or this role may not register workers at all.
		 */
		fprintf(stderr, "%s: cannot run as worker \"%s\" (see the error above)\n"
				"If the name belongs to another role, choose another --name; if this role lacks\n"
				"queue_worker, ask a queue_admin to grant it.\n", progname, worker_name);
		exit(1);
	}
	return qs;
}

/*
 * Send the registration the worker owes, if any and if it is time.  A
 * registration that met a "not now" (a lock or statement timeout, a
 * deadlock) or a lost connection stays owed and is sent again a second
 * later, the start's with restart until one is made: the loop claims
 * nothing while one is owed (worker_registered), so a restart made late
 * never ends a lease of this process, and the claims are made with the
 * worker's labels and capacity.  Returns true once nothing is owed.
 */
bool
ensure_registered(void)
{
	if (!register_due)
		return true;
	if (conn == NULL || now_mono() < register_retry)
		return false;
	if (register_worker(restart_due) == Q_RETRY)
	{
		register_retry = now_mono() + 1.0;
		return false;
	}
	/* made, or refused for good (an SQL error): sending it again will not help */
	register_due = false;
	restart_due = false;
	return true;
}

/* Is the worker registered, with nothing owed? */
bool
worker_registered(void)
{
	return !register_due;
}

/* When ensure_registered should be called again. */
double
registration_retry_at(void)
{
	return register_retry;
}

bool
try_connect(void)
{
	char		err[512];

	conn = open_connection(err, sizeof(err));
	if (conn == NULL)
	{
		log_msg("cannot connect to the database: %s; retrying in %.1f s",
				err, reconnect_delay);
		next_connect = now_mono() + reconnect_delay;
		reconnect_delay = fmin(reconnect_delay * 2, RECONNECT_MAX);
		return false;
	}
	log_msg("connected to the database again");
	reconnect_delay = RECONNECT_MIN;
	start_listening();
	/*
	 * NB: heartbeat before register_worker.  The first heartbeat from a new
	 * session stops renewing the leases taken in the old one, among them a
	 * claim whose reply was lost with the old connection, so that one
	 * comes back within one lease; this worker's own items it extends
	 * itself.  register_worker first would make the new session look old.
	 */
	{
		const char *vals[1] = {worker_name};

		run_query("heartbeat", "SELECT queue.heartbeat($1)", 1, vals, NULL, NULL);
	}
	register_due = true;
	register_retry = 0;
	ensure_registered();
	/* the heartbeat set the leases to the queue's lease_timeout: extend now */
	for (int i = 0; i < nitems; i++)
		items[i].next_extend = 0;
	return conn != NULL;
}


/*
 * Claim up to `want` items.  Returns the number claimed, or -1 when the
 * claim could not be made (connection trouble or an error).
 */
int
claim(int want, char *sqlstate)
{
	char		n[16];
	const char *vals[4];
	PGresult   *res;
	int			got;
	QStatus		qs;

	snprintf(n, sizeof(n), "%d", want);
	vals[0] = opt.queue;
	vals[1] = worker_name;
	vals[2] = n;
	vals[3] = opt.lease;
	qs = run_query("dequeue",
				   "SELECT item_id, lease_token, payload, attempt, max_attempts,"
				   " extract(epoch FROM lease_expires_at - clock_timestamp())::float8,"
				   " progress"
				   " FROM queue.dequeue($1, $2, $3::int, $4::interval)",
				   4, vals, &res, sqlstate);
	if (qs != Q_OK)
		return -1;

	got = PQntuples(res);
	for (int r = 0; r < got; r++)
	{
		Item	   *it = item_slot();
		double		left;

		if (it == NULL)
		{
			/* cannot happen: we never ask for more than free slots */
			log_msg("internal error: no free item slot");
			break;
		}
		item_free(it);
		it->state = IT_WAITING;
		snprintf(it->id, sizeof(it->id), "%s", PQgetvalue(res, r, 0));
		snprintf(it->token, sizeof(it->token), "%s", PQgetvalue(res, r, 1));
		it->payload = xstrdup(PQgetvalue(res, r, 2));
		it->attempt = atoi(PQgetvalue(res, r, 3));
		it->max_attempts = atoi(PQgetvalue(res, r, 4));
		if (!PQgetisnull(res, r, 6))
			it->progress = xstrdup(PQgetvalue(res, r, 6));
		left = PQgetisnull(res, r, 5) ? lease_secs : atof(PQgetvalue(res, r, 5));
		it->claimed_at = now_mono();
		it->lease_until = it->claimed_at + left;
		it->next_extend = it->claimed_at + fmax(0.2, left / 3.0);
		totals.claimed++;
		log_msg("claimed item %s (attempt %d/%d)", it->id, it->attempt, it->max_attempts);
	}
	PQclear(res);
	return got;
}


/* Send pending checkpoints.  Returns false when the connection failed. */
bool
item_send_checkpoints(Item *it)
{
	while (it->ncheckpoints > 0 && !it->lost && !it->refused)
	{
		const char *vals[4] = {opt.queue, it->id, it->token, it->checkpoints[0]};
		PGresult   *res;
		QStatus		qs;

		qs = run_query("checkpoint",
					   "SELECT queue.checkpoint($1, $2::bigint, $3::bigint,"
					   " pg_catalog.jsonb_extract_path($4::jsonb, 'checkpoint'))",
					   4, vals, &res, NULL);
		if (qs == Q_RETRY)
			return false;
		if (qs == Q_OK)
		{
			bool		ok = !PQgetisnull(res, 0, 0) && PQgetvalue(res, 0, 0)[0] == 't';

			PQclear(res);
			if (ok)
				log_msg("item %s checkpoint saved", it->id);
			else if (!it->lost)
			{
				/* as for a refused extension: cancelled, or someone else's */
				extension_refused(it, "checkpoint");
			}
		}
		free(it->checkpoints[0]);
		memmove(it->checkpoints, it->checkpoints + 1,
				sizeof(char *) * (it->ncheckpoints - 1));
		it->ncheckpoints--;
	}
	return true;
}

/* Count and log what the server said to an item's report. */
static void
log_report(Item *it, PGresult *res, double ran)
{
	bool		isnull = PQgetisnull(res, 0, 0);
	const char *v = isnull ? "" : PQgetvalue(res, 0, 0);

	switch (it->outcome)
	{
		case OUT_COMPLETE:
			if (v[0] == 't')
			{
				totals.completed++;
				log_msg("done item %s in %.2f s (attempt %d)", it->id, ran, it->attempt);
			}
			else
			{
				totals.stale++;
				log_msg("item %s finished in %.2f s but its lease was no longer current; completion refused",
						it->id, ran);
			}
			break;
		case OUT_TRANSIENT:
		case OUT_PERMANENT:
			if (isnull)
			{
				totals.stale++;
				log_msg("item %s failed in %.2f s but its lease was no longer current; failure not recorded",
						it->id, ran);
			}
			else
			{
				char		first[200];

				snprintf(first, sizeof(first), "%s", it->error);
				first[strcspn(first, "\n")] = '\0';
				if (!strcmp(v, "dead"))
					totals.dead++;
				else
					totals.retrying++;
				log_msg("failed item %s in %.2f s (attempt %d/%d, %s%s%s%s): %s",
						it->id, ran, it->attempt, it->max_attempts,
						it->outcome == OUT_PERMANENT ? "permanent" : "transient",
						it->error_code ? ", " : "", it->error_code ? it->error_code : "",
						!strcmp(v, "dead") ? ", now a dead letter" : ", will retry",
						first);
			}
			break;
		case OUT_RELEASE:
			if (v[0] == 't' && it->refused)
			{
				totals.cancelled++;
				log_msg("item %s: command stopped after %.2f s and the cancelled item handed back",
						it->id, ran);
			}
			else if (v[0] == 't')
			{
				totals.released++;
				log_msg("released item %s", it->id);
			}
			else
				log_msg("item %s: release refused (lease no longer current)", it->id);
			break;
		default:
			break;
	}
}

/*
 * Deliver an item's report.  Returns false if it must be retried after
 * reconnecting; otherwise the item's slot is freed.
 */
bool
item_report(Item *it)
{
	PGresult   *res = NULL;
	QStatus		qs = Q_OK;
	double		ran = it->started_at > 0 ? it->finished_at - it->started_at : 0;
	char		sqlstate[6];

	if (!item_send_checkpoints(it))
		return false;

	switch (it->outcome)
	{
		case OUT_DROP:
			totals.lost++;
			log_msg("item %s lost its lease after %.2f s; command killed, outcome not reported",
					it->id, ran);
			item_free(it);
			return true;

		case OUT_COMPLETE:
			{
				const char *vals[4] = {opt.queue, it->id, it->token, it->result};

				if (it->result == NULL)
					qs = run_query("complete",
								   "SELECT queue.complete($1, $2::bigint, $3::bigint)",
								   3, vals, &res, sqlstate);
				else if (it->result_json)
				{
					qs = run_query("complete",
								   "SELECT queue.complete($1, $2::bigint, $3::bigint, $4::jsonb)",
								   4, vals, &res, sqlstate);
					/* valid JSON the server still refuses: keep it as text */
					if (qs == Q_FAIL && !strncmp(sqlstate, "22", 2))
						it->result_json = false;
				}
				if (it->result != NULL && !it->result_json)
					qs = run_query("complete",
								   "SELECT queue.complete($1, $2::bigint, $3::bigint,"
								   " pg_catalog.jsonb_build_object('stdout', $4::text))",
								   4, vals, &res, sqlstate);
				/*
				 * A result over queue.max_payload_bytes: the work is done,
				 * so the item completes with the start of its output.
				 */
				if (it->result != NULL && qs == Q_FAIL && !strcmp(sqlstate, "54000"))
					qs = run_query("complete",
								   "SELECT queue.complete($1, $2::bigint, $3::bigint,"
								   " pg_catalog.jsonb_build_object('stdout', pg_catalog.left($4::text, "
								   RESULT_CUT_CHARS "), 'stdout_cut', true))",
								   4, vals, &res, sqlstate);
				break;
			}

		case OUT_TRANSIENT:
		case OUT_PERMANENT:
			{
				const char *vals[6] = {opt.queue, it->id, it->token, it->error,
					it->error_code, it->outcome == OUT_PERMANENT ? "true" : "false"};

				qs = run_query("fail",
							   "SELECT queue.fail($1, $2::bigint, $3::bigint, $4, $5, $6::boolean)",
							   6, vals, &res, sqlstate);
				break;
			}

		case OUT_RELEASE:
			{
				const char *vals[3] = {opt.queue, it->id, it->token};

				qs = run_query("release",
							   "SELECT queue.release($1, $2::bigint, $3::bigint)",
							   3, vals, &res, sqlstate);
				break;
			}

		case OUT_NONE:
			return true;
	}

	if (qs == Q_RETRY)
		return false;
	if (qs == Q_FAIL)
	{
		totals.unreported++;
		end_refused(it, sqlstate);
		item_free(it);
		return true;
	}

	log_report(it, res, ran);
	PQclear(res);
	item_free(it);
	return true;
}

/*
 * The server refused an item's report (an SQL error, not a lost
 * connection): end the lease with a transient failure, so that the
 * worker's heartbeats stop renewing an item it no longer tracks and the
 * item is tried again (or dead-lettered once its attempts are spent).
 */
static void
end_refused(Item *it, const char *sqlstate)
{
	char		error[64];
	const char *vals[4] = {opt.queue, it->id, it->token, error};
	QStatus		qs;

	snprintf(error, sizeof(error), "the server refused the report (SQLSTATE %s)", sqlstate);
	qs = run_query("fail",
				   "SELECT queue.fail($1, $2::bigint, $3::bigint, $4, 'WORKER_REPORT_REFUSED', false)",
				   4, vals, NULL, NULL);
	if (qs == Q_OK)
		log_msg("item %s: report refused (SQLSTATE %s); failed it for a retry", it->id, sqlstate);
	else
		log_msg("item %s: report refused (SQLSTATE %s) and its failure too; "
				"it comes back when this worker stops or its lease runs out", it->id, sqlstate);
}

/*
 * Is the item still leased to this worker (same attempt, processing)?
 * Then extend_lease refused it although the lease is ours: the operator
 * cancelled it (or a cap refuses to revive an expired lease).
 */
static bool
still_ours(Item *it)
{
	char		attempt[16];
	const char *vals[4] = {opt.queue, it->id, worker_name, attempt};
	PGresult   *res;
	bool		ours;

	snprintf(attempt, sizeof(attempt), "%d", it->attempt);
	if (run_query("looking up a refused item",
				  "SELECT count(*) > 0 FROM queue.item($1, $2::bigint) i"
				  " WHERE i.state = 'processing' AND i.worker = $3 AND i.attempt = $4::int",
				  4, vals, &res, NULL) != Q_OK)
		return false;
	ours = PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	return ours;
}

/*
 * extend_lease returned NULL: stop the command now, whatever happens next.
 * If someone else holds the item, say nothing more; if the lease is still
 * ours (a cancelled item), hand it back with release, which the server
 * turns into the dead letter the operator asked for.
 */
static void
extension_refused(Item *it, const char *what)
{
	double		age = now_mono() - it->claimed_at;

	if (still_ours(it))
	{
		log_msg("item %s was cancelled (%s refused it after %.2f s); stopping the command",
				it->id, what, age);
		it->refused = true;
		if (it->state == IT_WAITING)
		{
			it->state = IT_REPORT;
			it->outcome = OUT_RELEASE;
			it->finished_at = now_mono();
		}
		else
			item_kill(it, SIGKILL);
		return;
	}
	log_msg("item %s: lease lost after %.2f s (someone else holds it now)", it->id, age);
	it->lost = true;
	if (it->state == IT_WAITING)
	{
		totals.lost++;
		item_free(it);
	}
	else
		item_kill(it, SIGKILL);
}

/*
 * Keep leases alive: extend each lease that is due.  Returns false when
 * the connection failed (the rest wait for the reconnect).
 */
bool
extend_leases(void)
{
	double		t = now_mono();

	for (int i = 0; i < nitems; i++)
	{
		Item	   *it = &items[i];
		const char *vals[4];
		PGresult   *res;
		QStatus		qs;

		if ((it->state != IT_WAITING && it->state != IT_RUNNING) || it->lost ||
			it->refused || it->next_extend > t)
			continue;
		vals[0] = opt.queue;
		vals[1] = it->id;
		vals[2] = it->token;
		vals[3] = opt.lease;
		qs = run_query("extend_lease",
					   "SELECT e IS NOT NULL, extract(epoch FROM e - clock_timestamp())::float8"
					   " FROM queue.extend_lease($1, $2::bigint, $3::bigint, $4::interval) AS e",
					   4, vals, &res, NULL);
		if (qs == Q_RETRY && conn == NULL)
			return false;
		if (qs == Q_RETRY)
		{
			/*
			 * A "not now" for this lease alone (its row locked past
			 * lock_timeout, a deadlock): try it again shortly and go on
			 * with the others, which must not lapse meanwhile.
			 */
			it->next_extend = now_mono() + 0.5;
			continue;
		}
		if (qs == Q_FAIL)
		{
			it->next_extend = now_mono() + 1.0;
			continue;
		}
		if (PQgetvalue(res, 0, 0)[0] == 't')
		{
			double		left = atof(PQgetvalue(res, 0, 1));

			it->lease_until = now_mono() + left;
			it->next_extend = now_mono() + fmax(0.2, left / 3.0);
		}
		else
		{
			PQclear(res);
			extension_refused(it, "extend_lease");
			continue;
		}
		PQclear(res);
	}
	return true;
}

/* Connect and check the extension, the queue and the lease. */
void
startup_checks(void)
{
	char		err[512];
	PGresult   *res;
	char		sqlstate[6];
	const char *vals[2];
	QStatus		qs;

	conn = open_connection(err, sizeof(err));
	if (conn == NULL)
	{
		fprintf(stderr, "%s: cannot connect to the database: %s\n"
				"Check --dsn (for example --dsn 'host=db1 dbname=app user=bot') or the PG* environment variables.\n",
				progname, err);
		exit(1);
	}

	vals[0] = opt.queue;
	qs = run_query("looking up the queue",
				   "SELECT extract(epoch FROM lease_timeout)::float8, paused"
				   " FROM queue.queues WHERE queue_name = $1",
				   1, vals, &res, sqlstate);
	if (qs != Q_OK)
	{
		if (!strcmp(sqlstate, "3F000") || !strcmp(sqlstate, "42P01"))
			fprintf(stderr, "%s: the queue extension is not installed in this database\n"
					"Run CREATE EXTENSION queue there, or point --dsn at the right database.\n", progname);
		else if (!strcmp(sqlstate, "42501"))
			fprintf(stderr, "%s: permission denied reading queue.queues\n"
					"Grant the role queue_worker to the database user the worker connects as.\n", progname);
		else
			fprintf(stderr, "%s: cannot look up queue \"%s\"\n", progname, opt.queue);
		exit(1);
	}
	if (PQntuples(res) == 0)
	{
		/*
		 * queue.queues lists only the queues this role may read, so no row
		 * is also what a queue closed to the role gives.  A call naming the
		 * queue tells the two apart: 42501 for a closed one, 42704 for an
		 * unknown one.
		 */
		PQclear(res);
		qs = run_query("checking access to the queue",
					   "SELECT count(*) FROM queue.item($1, 0)", 1, vals, &res, sqlstate);
		if (res)
			PQclear(res);
		if (qs == Q_FAIL && !strcmp(sqlstate, "42501"))
		{
			fprintf(stderr, "%s: permission denied for queue \"%s\"\n"
					"The queue is closed to this database user: ask a queue_admin to run\n"
					"SELECT queue.grant_queue('%s', <role>, 'worker') for it, or check --dsn.\n",
					progname, opt.queue, opt.queue);
			exit(1);
		}
		fprintf(stderr, "%s: queue \"%s\" does not exist\n"
				"Create it with SELECT queue.create_queue('%s'), or check the spelling of --queue.\n",
				progname, opt.queue, opt.queue);
		exit(1);
	}
	lease_secs = PQgetisnull(res, 0, 0) ? 300.0 : atof(PQgetvalue(res, 0, 0));
	PQclear(res);

	if (opt.lease)
	{
		vals[0] = opt.lease;
		qs = run_query("checking --lease",
					   "SELECT extract(epoch FROM $1::interval)::float8", 1, vals, &res, sqlstate);
		if (qs != Q_OK)
		{
			fprintf(stderr, "%s: invalid --lease \"%s\": give a PostgreSQL interval such as '5 min' or 30s\n",
					progname, opt.lease);
			exit(2);
		}
		lease_secs = atof(PQgetvalue(res, 0, 0));
		PQclear(res);
		if (lease_secs < 1.0)
		{
			fprintf(stderr, "%s: invalid --lease \"%s\": a lease must last at least 1 second\n",
					progname, opt.lease);
			exit(2);
		}
	}
	if (opt.heartbeat == 0)
		opt.heartbeat = fmin(10.0, fmax(0.5, lease_secs / 3.0));

	start_listening();
	detect_register_args();
	register_due = true;
	ensure_registered();
}

/* When the loop should call try_connect again. */
double
reconnect_at(void)
{
	return next_connect;
}
