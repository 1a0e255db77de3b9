/*-------------------------------------------------------------------------
 *
 * queue-worker.c
 *		Turn any command into a bot that consumes a `queue` queue.
 *
 * queue-worker claims items with queue.dequeue(), runs the command given
 * with --exec once per item (through /bin/sh -c, payload JSON on stdin,
 * item facts in QUEUE_* environment variables), keeps each lease alive
 * while the command runs, and reports the outcome: exit 0 completes the
 * item, exit 75 (EX_TEMPFAIL) fails it transiently, anything else fails
 * it permanently.
 *
 * Design.  One process, one libpq connection, one poll() loop; commands
 * run as child processes in their own process group, so a lost lease or
 * the end of the grace period can kill the whole pipeline.  Signals are
 * turned into bytes on a self-pipe so the loop handles them in order.
 * Every item the worker holds is in the `items` table below; an item
 * stays there until its outcome is known to the database, so a report
 * that fails because the connection died is sent again, with the same
 * lease token, after reconnecting (the token makes a duplicate report a
 * harmless no-op).  LISTEN queue_<name> wakes the loop on new work; a
 * slow poll catches retries whose backoff ended and a resumed queue.
 *
 * Every SQL statement is a constant string run with PQexecParams; values
 * travel only as parameters.  The one exception is LISTEN, whose channel
 * is an identifier: it is built from the validated queue name and quoted
 * with PQescapeIdentifier.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"

#ifndef QW_VERSION
#define QW_VERSION "0.1.0"
#endif

#define EXIT_TEMPFAIL		75		/* sysexits.h EX_TEMPFAIL: retry later */
#define MAX_CONCURRENCY		1024
#define MAX_BATCH			10000
#define STDOUT_CAP			(1024 * 1024)	/* stdout kept for the result */
#define STDOUT_TEXT_CAP		(64 * 1024)	/* non-JSON stdout kept as text */
#define STDERR_CAP			8192	/* tail of stderr kept for errors */
#define ERROR_LINES			20		/* stderr lines sent as the error */
#define LINE_CAP			(256 * 1024)	/* longest checkpoint line */
#define KILL_WAIT			3.0		/* SIGTERM -> SIGKILL delay, seconds */
#define PIPE_WAIT			1.0		/* wait for pipes after exit, seconds */
#define RECONNECT_MIN		0.5
#define RECONNECT_MAX		30.0

/* Where an item is in this worker's hands. */
typedef enum
{
	IT_FREE = 0,				/* slot unused */
	IT_WAITING,					/* claimed, waiting for a free slot */
	IT_RUNNING,					/* command running */
	IT_REPORT					/* outcome known, report not yet accepted */
} ItemState;

/* The report an item owes the database. */
typedef enum
{
	OUT_NONE = 0,
	OUT_COMPLETE,				/* queue.complete */
	OUT_TRANSIENT,				/* queue.fail, permanent => false */
	OUT_PERMANENT,				/* queue.fail, permanent => true */
	OUT_RELEASE,				/* queue.release (shutdown) */
	OUT_DROP					/* lease lost: say nothing */
} Outcome;

/* Growable byte buffer. */
typedef struct Buf
{
	char	   *data;			/* NUL-terminated contents */
	size_t		len;			/* bytes used */
	size_t		cap;			/* bytes allocated */
	bool		truncated;		/* input beyond the cap was dropped */
} Buf;

/* One claimed item. */
typedef struct Item
{
	ItemState	state;
	char		id[24];			/* item_id, as text */
	char		token[24];		/* lease_token, as text */
	int			attempt;		/* this claim's attempt number */
	int			max_attempts;	/* attempts allowed */
	char	   *payload;		/* payload JSON text */
	char	   *progress;		/* progress JSON text, NULL if none */
	double		claimed_at;		/* monotonic times, seconds */
	double		started_at;
	double		finished_at;
	double		lease_until;	/* our estimate of the lease's expiry */
	double		next_extend;	/* when to call extend_lease next */
	pid_t		pid;			/* child (and process group) id, 0 if none */
	int			out_fd;			/* child's stdout, -1 when closed */
	int			err_fd;			/* child's stderr, -1 when closed */
	bool		reaped;			/* waitpid() collected the child */
	int			wstatus;		/* its wait status */
	double		reaped_at;
	bool		lost;			/* lease lost: kill, do not report */
	bool		timed_out;		/* ran past --timeout */
	bool		stopping;		/* killed at the end of the grace period */
	double		kill_at;		/* when SIGTERM escalates to SIGKILL */
	Buf			out;			/* stdout, minus checkpoint lines */
	Buf			line;			/* current partial stdout line */
	Buf			err;			/* stderr tail */
	char	  **checkpoints;	/* checkpoint JSON not yet sent */
	int			ncheckpoints;
	Outcome		outcome;		/* report owed, once known */
	char	   *error;			/* fail: error text */
	char	   *error_code;		/* fail: error code or NULL */
	char	   *result;			/* complete: result text or NULL */
	bool		result_json;	/* result is JSON (else wrap as stdout) */
} Item;

/* Command line settings. */
typedef struct Options
{
	const char *dsn;
	const char *queue;
	const char *exec;
	const char *name;
	const char *lease;			/* interval text, NULL = queue's default */
	int			concurrency;
	int			batch;			/* 0 = as many as free slots */
	long		max_items;		/* 0 = unlimited */
	double		idle_exit;		/* 0 = never */
	double		grace;
	double		poll;
	double		poll_max;
	double		heartbeat;		/* 0 = derived from the lease */
	double		timeout;		/* per-item run time limit, 0 = none */
	bool		listen;
	bool		verbose;
} Options;

/* Counters for the exit summary. */
typedef struct Totals
{
	long		claimed;
	long		completed;
	long		retrying;
	long		dead;
	long		lost;
	long		released;
	long		stale;			/* reports refused: lease no longer ours */
	long		unreported;		/* outcomes never delivered */
} Totals;

static Options opt = {
	.dsn = "",
	.concurrency = 1,
	.grace = 30.0,
	.poll = 5.0,
	.poll_max = 30.0,
	.listen = true,
};
static Totals totals;
static Item *items;
static int	nitems;				/* slots allocated */
static PGconn *conn;
static double next_connect;		/* when to try to reconnect */
static double reconnect_delay = RECONNECT_MIN;
static int	sigpipe_fds[2] = {-1, -1};
static bool shutting_down;
static double grace_until;
static bool fatal_error;
static double lease_secs;		/* lease length used for scheduling */
static double start_time;
static char worker_name[256];
static const char *progname = "queue-worker";
static char **exec_argv;		/* --exec split into words, when it needs no shell */

static void log_msg(const char *fmt,...) __attribute__((format(printf, 1, 2)));
static void die_usage(const char *fmt,...) __attribute__((format(printf, 1, 2)));

/* ---------------------------------------------------------------------
 * small helpers
 * ---------------------------------------------------------------------
 */

static double
now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
log_msg(const char *fmt,...)
{
	va_list		ap;
	struct timeval tv;
	struct tm	tm;
	char		stamp[32];

	gettimeofday(&tv, NULL);
	localtime_r(&tv.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(stderr, "%s.%03d %s %s: ", stamp, (int) (tv.tv_usec / 1000),
			progname, worker_name[0] ? worker_name : "-");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void
die_usage(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry \"%s --help\" for more information.\n", progname);
	exit(2);
}

static void *
xmalloc(size_t n)
{
	void	   *p = malloc(n ? n : 1);

	if (p == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		exit(1);
	}
	return p;
}

static char *
xstrdup(const char *s)
{
	size_t		n = strlen(s);
	char	   *p = xmalloc(n + 1);

	memcpy(p, s, n + 1);
	return p;
}

static void
buf_append(Buf *b, const char *data, size_t n, size_t cap)
{
	if (b->len + n > cap)
	{
		b->truncated = true;
		n = b->len < cap ? cap - b->len : 0;
	}
	if (b->len + n + 1 > b->cap)
	{
		size_t		ncap = b->cap ? b->cap : 256;

		while (ncap < b->len + n + 1)
			ncap *= 2;
		b->data = realloc(b->data, ncap);
		if (b->data == NULL)
		{
			fprintf(stderr, "%s: out of memory\n", progname);
			exit(1);
		}
		b->cap = ncap;
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
}

/* Keep only the last `cap` bytes (for stderr). */
static void
buf_append_tail(Buf *b, const char *data, size_t n, size_t cap)
{
	if (n >= cap)
	{
		b->len = 0;
		data += n - cap;
		n = cap;
		b->truncated = true;
	}
	else if (b->len + n > cap)
	{
		size_t		drop = b->len + n - cap;

		memmove(b->data, b->data + drop, b->len - drop);
		b->len -= drop;
		b->truncated = true;
	}
	buf_append(b, data, n, cap);
}

static void
buf_free(Buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/*
 * Make text safe to send as a PostgreSQL text value: replace NUL bytes
 * and invalid UTF-8 sequences with '?'.  Works in place.
 */
static void
sanitize_utf8(char *s, size_t len)
{
	size_t		i = 0;

	while (i < len)
	{
		unsigned char c = (unsigned char) s[i];
		int			n;

		if (c == 0)
		{
			s[i++] = '?';
			continue;
		}
		if (c < 0x80)
		{
			i++;
			continue;
		}
		if ((c & 0xE0) == 0xC0 && c >= 0xC2)
			n = 2;
		else if ((c & 0xF0) == 0xE0)
			n = 3;
		else if ((c & 0xF8) == 0xF0 && c <= 0xF4)
			n = 4;
		else
			n = 0;
		if (n == 0 || i + n > len)
		{
			s[i++] = '?';
			continue;
		}
		for (int k = 1; k < n; k++)
			if (((unsigned char) s[i + k] & 0xC0) != 0x80)
			{
				n = 0;
				break;
			}
		if (n == 0)
		{
			s[i++] = '?';
			continue;
		}
		i += n;
	}
}

/*
 * Parse a duration: a number with an optional unit (ms, s, min/m, h, d;
 * long forms too); a bare number means seconds.
 */
static bool
parse_duration(const char *s, double *out)
{
	char	   *end;
	double		v;
	double		mult = 1.0;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno != 0 || !isfinite(v) || v < 0)
		return false;
	while (isspace((unsigned char) *end))
		end++;
	if (*end == '\0' || !strcmp(end, "s") || !strcmp(end, "sec") ||
		!strcmp(end, "secs") || !strcmp(end, "second") || !strcmp(end, "seconds"))
		mult = 1.0;
	else if (!strcmp(end, "ms") || !strcmp(end, "msec") ||
			 !strcmp(end, "millisecond") || !strcmp(end, "milliseconds"))
		mult = 0.001;
	else if (!strcmp(end, "m") || !strcmp(end, "min") || !strcmp(end, "mins") ||
			 !strcmp(end, "minute") || !strcmp(end, "minutes"))
		mult = 60.0;
	else if (!strcmp(end, "h") || !strcmp(end, "hour") || !strcmp(end, "hours"))
		mult = 3600.0;
	else if (!strcmp(end, "d") || !strcmp(end, "day") || !strcmp(end, "days"))
		mult = 86400.0;
	else
		return false;
	*out = v * mult;
	return true;
}

static bool
parse_long(const char *s, long lo, long hi, long *out)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

/* Queue names as the extension accepts them: ^[a-z][a-z0-9_]{0,46}$ */
static bool
valid_queue_name(const char *s)
{
	size_t		n = strlen(s);

	if (n < 1 || n > 47 || !(s[0] >= 'a' && s[0] <= 'z'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

/* ---------------------------------------------------------------------
 * a small JSON syntax checker (RFC 8259), to tell a JSON result from text
 * ---------------------------------------------------------------------
 */

static const char *json_value(const char *p, int depth);

static const char *
json_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

static const char *
json_string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	for (;;)
	{
		unsigned char c = (unsigned char) *p;

		if (c == '"')
			return p + 1;
		if (c < 0x20)
			return NULL;
		if (c == '\\')
		{
			p++;
			if (*p == 'u')
			{
				for (int i = 1; i <= 4; i++)
					if (!isxdigit((unsigned char) p[i]))
						return NULL;
				/* jsonb refuses \u0000 */
				if (!strncmp(p + 1, "0000", 4))
					return NULL;
				p += 5;
			}
			else if (*p && strchr("\"\\/bfnrt", *p))
				p++;
			else
				return NULL;
		}
		else
			p++;
	}
}

static const char *
json_number(const char *p)
{
	if (*p == '-')
		p++;
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (isdigit((unsigned char) *p))
			p++;
	else
		return NULL;
	if (*p == '.')
	{
		p++;
		if (!isdigit((unsigned char) *p))
			return NULL;
		while (isdigit((unsigned char) *p))
			p++;
	}
	if (*p == 'e' || *p == 'E')
	{
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!isdigit((unsigned char) *p))
			return NULL;
		while (isdigit((unsigned char) *p))
			p++;
	}
	return p;
}

static const char *
json_value(const char *p, int depth)
{
	if (depth > 500)
		return NULL;
	p = json_ws(p);
	switch (*p)
	{
		case '{':
			p = json_ws(p + 1);
			if (*p == '}')
				return p + 1;
			for (;;)
			{
				p = json_string(json_ws(p));
				if (p == NULL)
					return NULL;
				p = json_ws(p);
				if (*p++ != ':')
					return NULL;
				p = json_value(p, depth + 1);
				if (p == NULL)
					return NULL;
				p = json_ws(p);
				if (*p == '}')
					return p + 1;
				if (*p++ != ',')
					return NULL;
			}
		case '[':
			p = json_ws(p + 1);
			if (*p == ']')
				return p + 1;
			for (;;)
			{
				p = json_value(p, depth + 1);
				if (p == NULL)
					return NULL;
				p = json_ws(p);
				if (*p == ']')
					return p + 1;
				if (*p++ != ',')
					return NULL;
			}
		case '"':
			return json_string(p);
		case 't':
			return strncmp(p, "true", 4) ? NULL : p + 4;
		case 'f':
			return strncmp(p, "false", 5) ? NULL : p + 5;
		case 'n':
			return strncmp(p, "null", 4) ? NULL : p + 4;
		default:
			return json_number(p);
	}
}

static bool
json_valid(const char *s)
{
	const char *p = json_value(s, 0);

	return p != NULL && *json_ws(p) == '\0';
}

/* ---------------------------------------------------------------------
 * database access
 * ---------------------------------------------------------------------
 */

typedef enum
{
	Q_OK,						/* statement succeeded */
	Q_RETRY,					/* connection trouble: retry after reconnect */
	Q_FAIL						/* SQL error: retrying will not help */
} QStatus;

static void disconnect(const char *why);

/*
 * Run one parameterized statement.  On success returns Q_OK and the
 * result in *res (caller clears it).  Connection failures and transient
 * server states return Q_RETRY and drop the connection; other errors are
 * logged and return Q_FAIL, with the SQLSTATE copied to sqlstate.
 */
static QStatus
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
		!strncmp(state, "40", 2) || !strncmp(state, "53", 2))
	{
		char		msg[512];

		snprintf(msg, sizeof(msg), "%s: %s", what,
				 r ? PQresultErrorMessage(r) : PQerrorMessage(conn));
		msg[strcspn(msg, "\n")] = '\0';
		if (r)
			PQclear(r);
		if (PQstatus(conn) == CONNECTION_BAD || state == NULL ||
			!strncmp(state, "08", 2) || !strncmp(state, "57P", 3))
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

static void
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

static PGconn *
open_connection(char *errbuf, size_t errlen)
{
	const char *keys[] = {"connect_timeout", "dbname", "fallback_application_name", NULL};
	const char *vals[] = {"10", opt.dsn, "queue-worker", NULL};
	PGconn	   *c = PQconnectdbParams(keys, vals, 1);

	if (c == NULL || PQstatus(c) != CONNECTION_OK)
	{
		snprintf(errbuf, errlen, "%s", c ? PQerrorMessage(c) : "out of memory");
		errbuf[strcspn(errbuf, "\n")] = '\0';
		if (c)
			PQfinish(c);
		return NULL;
	}
	PQsetNoticeProcessor(c, notice_to_log, NULL);
	return c;
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
	snprintf(channel, sizeof(channel), "queue_%s", opt.queue);
	ident = PQescapeIdentifier(conn, channel, strlen(channel));
	if (ident == NULL)
		return;
	snprintf(sql, sizeof(sql), "LISTEN %s", ident);
	PQfreemem(ident);
	r = PQexec(conn, sql);
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		log_msg("LISTEN failed, falling back to polling: %s", PQerrorMessage(conn));
	PQclear(r);
}

static void
register_worker(void)
{
	char		cap[16];
	char		info[512];
	char		host[128] = "";
	const char *vals[4];
	PGresult   *res;

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
	if (run_query("register_worker",
				  "SELECT queue.register_worker($1, ARRAY[$2]::text[], $3::int, $4::jsonb)",
				  4, vals, &res, NULL) == Q_OK)
		PQclear(res);
}

static bool
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
	register_worker();
	return conn != NULL;
}

/* ---------------------------------------------------------------------
 * items
 * ---------------------------------------------------------------------
 */

static int
count_state(ItemState st)
{
	int			n = 0;

	for (int i = 0; i < nitems; i++)
		if (items[i].state == st)
			n++;
	return n;
}

static int
count_held(void)
{
	return nitems - count_state(IT_FREE);
}

static void
item_free(Item *it)
{
	free(it->payload);
	free(it->progress);
	buf_free(&it->out);
	buf_free(&it->line);
	buf_free(&it->err);
	for (int i = 0; i < it->ncheckpoints; i++)
		free(it->checkpoints[i]);
	free(it->checkpoints);
	free(it->error);
	free(it->error_code);
	free(it->result);
	memset(it, 0, sizeof(*it));
	it->out_fd = it->err_fd = -1;
	it->state = IT_FREE;
}

static Item *
item_slot(void)
{
	for (int i = 0; i < nitems; i++)
		if (items[i].state == IT_FREE)
			return &items[i];
	return NULL;
}

/* Elapsed seconds since the item was claimed. */
static double
item_age(const Item *it)
{
	return now_mono() - it->claimed_at;
}

/* Kill the item's process group. */
static void
item_kill(Item *it, int sig)
{
	if (it->pid > 0 && !it->reaped)
	{
		kill(-it->pid, sig);
		kill(it->pid, sig);
	}
}

/*
 * Claim up to `want` items.  Returns the number claimed, or -1 when the
 * claim could not be made (connection trouble or an error).
 */
static int
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

static void
set_cloexec_nonblock(int fd)
{
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Start the command for one waiting item. */
static bool
item_start(Item *it)
{
	int			outp[2];
	int			errp[2];
	FILE	   *in;
	pid_t		pid;
	pid_t		parent;

	in = tmpfile();
	if (in == NULL || fputs(it->payload, in) == EOF || fflush(in) != 0 ||
		fseek(in, 0, SEEK_SET) != 0)
	{
		log_msg("item %s: cannot stage the payload for the command: %s",
				it->id, strerror(errno));
		if (in)
			fclose(in);
		return false;
	}
	if (pipe(outp) != 0)
	{
		log_msg("item %s: pipe: %s", it->id, strerror(errno));
		fclose(in);
		return false;
	}
	if (pipe(errp) != 0)
	{
		log_msg("item %s: pipe: %s", it->id, strerror(errno));
		close(outp[0]);
		close(outp[1]);
		fclose(in);
		return false;
	}

	parent = getpid();
	pid = fork();
	if (pid < 0)
	{
		log_msg("item %s: fork: %s", it->id, strerror(errno));
		close(outp[0]);
		close(outp[1]);
		close(errp[0]);
		close(errp[1]);
		fclose(in);
		return false;
	}
	if (pid == 0)
	{
		char		num[24];
		sigset_t	none;

		setpgid(0, 0);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		signal(SIGCHLD, SIG_DFL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(fileno(in), 0);
		dup2(outp[1], 1);
		dup2(errp[1], 2);
		fclose(in);
		close(outp[0]);
		close(outp[1]);
		close(errp[0]);
		close(errp[1]);
		setenv("QUEUE_ITEM_ID", it->id, 1);
		setenv("QUEUE_LEASE_TOKEN", it->token, 1);
		snprintf(num, sizeof(num), "%d", it->attempt);
		setenv("QUEUE_ATTEMPT", num, 1);
		snprintf(num, sizeof(num), "%d", it->max_attempts);
		setenv("QUEUE_MAX_ATTEMPTS", num, 1);
		setenv("QUEUE_NAME", opt.queue, 1);
		setenv("QUEUE_WORKER", worker_name, 1);
		/* the environment caps one string at 128 kB on Linux */
		if (it->progress && strlen(it->progress) < 100 * 1024)
			setenv("QUEUE_PROGRESS", it->progress, 1);
		else
			unsetenv("QUEUE_PROGRESS");
#ifdef __linux__
		/* if the worker dies (even by SIGKILL), its commands die too */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
#endif
		if (exec_argv)
		{
			execvp(exec_argv[0], exec_argv);
			fprintf(stderr, "cannot run %s: %s\n", exec_argv[0], strerror(errno));
			_exit(errno == ENOENT ? 127 : 126);
		}
		execl("/bin/sh", "sh", "-c", opt.exec, (char *) NULL);
		fprintf(stderr, "cannot run /bin/sh: %s\n", strerror(errno));
		_exit(127);
	}

	/* parent */
	setpgid(pid, pid);			/* no race with the child's own call */
	fclose(in);
	close(outp[1]);
	close(errp[1]);
	set_cloexec_nonblock(outp[0]);
	set_cloexec_nonblock(errp[0]);
	it->pid = pid;
	it->out_fd = outp[0];
	it->err_fd = errp[0];
	it->started_at = now_mono();
	it->state = IT_RUNNING;
	return true;
}

/* A complete stdout line: checkpoint or output. */
static void
item_stdout_line(Item *it, const char *line, size_t len)
{
	const char *p = line;

	while (p < line + len && isspace((unsigned char) *p))
		p++;
	if (*p == '{' && len < LINE_CAP)
	{
		const char *q = json_ws(p + 1);

		if (!strncmp(q, "\"checkpoint\"", 12))
		{
			char	   *copy = xmalloc(len + 1);

			memcpy(copy, line, len);
			copy[len] = '\0';
			sanitize_utf8(copy, len);
			if (json_valid(copy))
			{
				it->checkpoints = realloc(it->checkpoints,
										  sizeof(char *) * (it->ncheckpoints + 1));
				if (it->checkpoints == NULL)
				{
					fprintf(stderr, "%s: out of memory\n", progname);
					exit(1);
				}
				it->checkpoints[it->ncheckpoints++] = copy;
				return;
			}
			free(copy);
		}
	}
	buf_append(&it->out, line, len, STDOUT_CAP);
	buf_append(&it->out, "\n", 1, STDOUT_CAP);
	if (opt.verbose)
		log_msg("item %s stdout: %.*s", it->id, (int) len, line);
}

/* Read what a child wrote; returns false at EOF. */
static bool
item_read(Item *it, int *fdp, bool is_stdout)
{
	char		chunk[8192];
	ssize_t		n;

	for (;;)
	{
		n = read(*fdp, chunk, sizeof(chunk));
		if (n > 0)
		{
			if (is_stdout)
			{
				const char *s = chunk;
				const char *e = chunk + n;

				while (s < e)
				{
					const char *nl = memchr(s, '\n', e - s);

					if (nl == NULL)
					{
						buf_append(&it->line, s, e - s, SIZE_MAX);
						if (it->line.len >= LINE_CAP)
						{
							/* too long for a checkpoint: plain output */
							item_stdout_line(it, it->line.data, it->line.len);
							it->line.len = 0;
						}
						break;
					}
					if (it->line.len > 0)
					{
						buf_append(&it->line, s, nl - s, SIZE_MAX);
						item_stdout_line(it, it->line.data, it->line.len);
						it->line.len = 0;
					}
					else
						item_stdout_line(it, s, nl - s);
					s = nl + 1;
				}
			}
			else
			{
				buf_append_tail(&it->err, chunk, n, STDERR_CAP);
				if (opt.verbose)
					log_msg("item %s stderr: %.*s", it->id, (int) n, chunk);
			}
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return true;
		if (n < 0 && errno == EINTR)
			continue;
		/* EOF or error */
		if (is_stdout && it->line.len > 0)
		{
			item_stdout_line(it, it->line.data, it->line.len);
			it->line.len = 0;
		}
		close(*fdp);
		*fdp = -1;
		return false;
	}
}

/* The last ERROR_LINES lines of stderr, trimmed. */
static char *
stderr_tail(Item *it)
{
	char	   *s;
	size_t		len = it->err.len;
	int			lines = 0;
	size_t		start;

	if (len == 0)
		return xstrdup("");
	s = it->err.data;
	while (len > 0 && isspace((unsigned char) s[len - 1]))
		len--;
	start = len;
	while (start > 0)
	{
		if (s[start - 1] == '\n' && ++lines >= ERROR_LINES)
			break;
		start--;
	}
	while (start < len && isspace((unsigned char) s[start]))
		start++;
	{
		char	   *out = xmalloc(len - start + 1);

		memcpy(out, s + start, len - start);
		out[len - start] = '\0';
		sanitize_utf8(out, len - start);
		return out;
	}
}

/*
 * The error-code convention: when the last stderr line starts with a
 * word of capitals, digits and underscores followed by a colon (for
 * example "ERP_TIMEOUT: no answer in 30 s"), that word is the error_code.
 */
static char *
error_code_of(const char *tail)
{
	const char *last = strrchr(tail, '\n');
	const char *p;
	size_t		n;

	last = last ? last + 1 : tail;
	while (isspace((unsigned char) *last))
		last++;
	p = last;
	if (!(*p >= 'A' && *p <= 'Z'))
		return NULL;
	while ((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_')
		p++;
	n = p - last;
	if (*p != ':' || n < 2 || n > 63)
		return NULL;
	{
		char	   *code = xmalloc(n + 1);

		memcpy(code, last, n);
		code[n] = '\0';
		return code;
	}
}

static const char *
signal_name(int sig)
{
	switch (sig)
	{
		case SIGKILL:
			return "SIGKILL";
		case SIGTERM:
			return "SIGTERM";
		case SIGINT:
			return "SIGINT";
		case SIGSEGV:
			return "SIGSEGV";
		case SIGABRT:
			return "SIGABRT";
		case SIGPIPE:
			return "SIGPIPE";
		case SIGHUP:
			return "SIGHUP";
		default:
			return "signal";
	}
}

/* The child exited and its pipes are closed: decide the report. */
static void
item_decide(Item *it)
{
	char	   *tail = stderr_tail(it);
	char		head[160];
	int			st = it->wstatus;

	it->finished_at = now_mono();
	it->pid = 0;
	it->state = IT_REPORT;

	if (it->lost)
	{
		it->outcome = OUT_DROP;
		free(tail);
		return;
	}
	if (it->stopping)
	{
		it->outcome = OUT_RELEASE;
		free(tail);
		return;
	}

	if (it->timed_out)
	{
		it->outcome = OUT_TRANSIENT;
		snprintf(head, sizeof(head), "command ran longer than --timeout %.0f s and was killed",
				 opt.timeout);
		it->error_code = xstrdup("WORKER_TIMEOUT");
	}
	else if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
	{
		size_t		len = it->out.len;
		char	   *s = it->out.data;

		it->outcome = OUT_COMPLETE;
		while (len > 0 && isspace((unsigned char) s[len - 1]))
			len--;
		if (len > 0)
		{
			s[len] = '\0';
			sanitize_utf8(s, len);
			if (!it->out.truncated && json_valid(s))
			{
				it->result = xstrdup(s);
				it->result_json = true;
			}
			else
			{
				if (len > STDOUT_TEXT_CAP)
				{
					len = STDOUT_TEXT_CAP;
					/* do not cut a UTF-8 sequence in half */
					while (len > 0 && ((unsigned char) s[len] & 0xC0) == 0x80)
						len--;
					s[len] = '\0';
				}
				it->result = xstrdup(s);
				it->result_json = false;
			}
		}
		free(tail);
		return;
	}
	else if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_TEMPFAIL)
	{
		it->outcome = OUT_TRANSIENT;
		snprintf(head, sizeof(head), "command exited with status %d (temporary failure)",
				 EXIT_TEMPFAIL);
	}
	else if (WIFEXITED(st))
	{
		it->outcome = OUT_PERMANENT;
		snprintf(head, sizeof(head), "command exited with status %d", WEXITSTATUS(st));
	}
	else
	{
		int			sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;

		it->outcome = OUT_PERMANENT;
		snprintf(head, sizeof(head), "command killed by signal %d (%s)", sig, signal_name(sig));
	}

	if (it->error_code == NULL)
		it->error_code = error_code_of(tail);
	if (tail[0] == '\0')
		it->error = xstrdup(head);
	else if (it->timed_out || WIFSIGNALED(st))
	{
		it->error = xmalloc(strlen(head) + strlen(tail) + 2);
		sprintf(it->error, "%s\n%s", head, tail);
	}
	else
		it->error = xstrdup(tail);
	free(tail);
}

/* Send pending checkpoints.  Returns false when the connection failed. */
static bool
item_send_checkpoints(Item *it)
{
	while (it->ncheckpoints > 0 && !it->lost)
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
				log_msg("item %s: lease lost (checkpoint refused); killing the command", it->id);
				it->lost = true;
				item_kill(it, SIGKILL);
			}
		}
		free(it->checkpoints[0]);
		memmove(it->checkpoints, it->checkpoints + 1,
				sizeof(char *) * (it->ncheckpoints - 1));
		it->ncheckpoints--;
	}
	return true;
}

/*
 * Deliver an item's report.  Returns false if it must be retried after
 * reconnecting; otherwise the item's slot is freed.
 */
static bool
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
		log_msg("item %s: report dropped after an SQL error; its lease will expire and it will be retried",
				it->id);
		item_free(it);
		return true;
	}

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
				if (v[0] == 't')
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
	PQclear(res);
	item_free(it);
	return true;
}

/* Keep leases alive; returns false when the connection failed. */
static bool
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
			it->next_extend > t)
			continue;
		vals[0] = opt.queue;
		vals[1] = it->id;
		vals[2] = it->token;
		vals[3] = opt.lease;
		qs = run_query("extend_lease",
					   "SELECT e IS NOT NULL, extract(epoch FROM e - clock_timestamp())::float8"
					   " FROM queue.extend_lease($1, $2::bigint, $3::bigint, $4::interval) AS e",
					   4, vals, &res, NULL);
		if (qs == Q_RETRY)
			return false;
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
			log_msg("item %s: lease lost after %.2f s (someone else holds it now)",
					it->id, item_age(it));
			it->lost = true;
			if (it->state == IT_WAITING)
			{
				totals.lost++;
				item_free(it);
			}
			else
				item_kill(it, SIGKILL);
		}
		PQclear(res);
	}
	return true;
}

/* ---------------------------------------------------------------------
 * signals
 * ---------------------------------------------------------------------
 */

static void
on_signal(int sig)
{
	int			save = errno;
	char		c = (char) sig;

	if (write(sigpipe_fds[1], &c, 1) < 0)
	{
		/* pipe full: a wake-up is already pending */
	}
	errno = save;
}

static void
setup_signals(void)
{
	struct sigaction sa;

	if (pipe(sigpipe_fds) != 0)
	{
		perror("pipe");
		exit(1);
	}
	set_cloexec_nonblock(sigpipe_fds[0]);
	set_cloexec_nonblock(sigpipe_fds[1]);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);	/* a closed terminal: stop gracefully */
	signal(SIGPIPE, SIG_IGN);
}

static void
begin_shutdown(int sig)
{
	if (shutting_down)
	{
		log_msg("second %s: ending the grace period now", signal_name(sig));
		grace_until = now_mono();
		return;
	}
	shutting_down = true;
	grace_until = now_mono() + opt.grace;
	if (sig)
		log_msg("%s received: claiming nothing new; %d running item(s) get up to %.0f s to finish",
				signal_name(sig), count_state(IT_RUNNING), opt.grace);
	/* claimed but not started: give them back now */
	for (int i = 0; i < nitems; i++)
		if (items[i].state == IT_WAITING)
		{
			items[i].state = IT_REPORT;
			items[i].outcome = OUT_RELEASE;
			items[i].finished_at = now_mono();
		}
}

static void
reap_children(void)
{
	pid_t		pid;
	int			st;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
	{
		for (int i = 0; i < nitems; i++)
			if (items[i].state == IT_RUNNING && items[i].pid == pid)
			{
				items[i].reaped = true;
				items[i].wstatus = st;
				items[i].reaped_at = now_mono();
				break;
			}
	}
}

/* ---------------------------------------------------------------------
 * startup
 * ---------------------------------------------------------------------
 */

static void
usage(void)
{
	printf("queue-worker runs a command once per item of a queue.\n\n"
		   "Usage:\n"
		   "  queue-worker --queue NAME --exec COMMAND [OPTION]...\n\n"
		   "Required:\n"
		   "  -q, --queue NAME        queue to consume (created with queue.create_queue)\n"
		   "  -e, --exec COMMAND      command run by /bin/sh -c for each item (a path and plain\n"
		   "                          words without shell syntax are run directly)\n\n"
		   "Options:\n"
		   "  -d, --dsn CONNSTR       libpq connection string or URI (default: PG* environment)\n"
		   "  -c, --concurrency N     commands running at once (default 1)\n"
		   "  -b, --batch N           items claimed per dequeue (default: free slots)\n"
		   "  -l, --lease INTERVAL    lease per claim, e.g. 5min (default: the queue's lease_timeout)\n"
		   "  -n, --name NAME         worker name (default: host-pid)\n"
		   "  -m, --max-items N       claim at most N items, then exit when they are done\n"
		   "  -i, --idle-exit DUR     exit after DUR without work (e.g. 30s)\n"
		   "  -g, --grace DUR         on SIGTERM/SIGINT, time running items get to finish (default 30s)\n"
		   "  -t, --timeout DUR       kill a command running longer and fail it transiently\n"
		   "                          with error_code WORKER_TIMEOUT (default: no limit)\n"
		   "      --poll DUR          poll interval when no notification comes (default 5s)\n"
		   "      --poll-max DUR      longest poll interval while the queue is paused (default 30s)\n"
		   "      --heartbeat DUR     worker heartbeat interval (default: lease/3, at most 10s)\n"
		   "      --no-listen         do not LISTEN for new items, only poll\n"
		   "  -v, --verbose           copy the commands' output to the log\n"
		   "  -h, --help              show this help and exit\n"
		   "  -V, --version           show the version and exit\n\n"
		   "Durations take a unit: ms, s, min (or m), h, d; a bare number is seconds.\n\n"
		   "The command gets the payload JSON on stdin and QUEUE_ITEM_ID, QUEUE_ATTEMPT,\n"
		   "QUEUE_MAX_ATTEMPTS, QUEUE_NAME, QUEUE_LEASE_TOKEN, QUEUE_WORKER and QUEUE_PROGRESS\n"
		   "(the item's checkpointed progress, JSON) in its environment.\n"
		   "  exit 0            the item is completed; stdout, if it is JSON, is the result,\n"
		   "                    other output is kept as {\"stdout\": \"...\"}\n"
		   "  exit 75           temporary failure (EX_TEMPFAIL): retried after a backoff\n"
		   "  other, or signal  permanent failure: the item becomes a dead letter\n"
		   "The last lines of stderr become the error.  If the last stderr line starts with\n"
		   "a code word and a colon, e.g. \"ERP_TIMEOUT: no answer\", ERP_TIMEOUT is the\n"
		   "error_code.  A stdout line {\"checkpoint\": {...}} saves progress with\n"
		   "queue.checkpoint at once; the item's progress survives retries.\n\n"
		   "SIGTERM, SIGINT or SIGHUP: claim nothing new, let running commands finish for --grace,\n"
		   "then kill them and release their items; a second signal ends the grace period.\n"
		   "Exit status: 0 normal end, 1 runtime failure, 2 usage error.\n");
}

static void
parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dsn", required_argument, NULL, 'd'},
		{"queue", required_argument, NULL, 'q'},
		{"exec", required_argument, NULL, 'e'},
		{"concurrency", required_argument, NULL, 'c'},
		{"batch", required_argument, NULL, 'b'},
		{"lease", required_argument, NULL, 'l'},
		{"name", required_argument, NULL, 'n'},
		{"max-items", required_argument, NULL, 'm'},
		{"idle-exit", required_argument, NULL, 'i'},
		{"grace", required_argument, NULL, 'g'},
		{"timeout", required_argument, NULL, 't'},
		{"poll", required_argument, NULL, 1},
		{"poll-max", required_argument, NULL, 2},
		{"heartbeat", required_argument, NULL, 3},
		{"no-listen", no_argument, NULL, 4},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}
	};
	int			c;
	long		v;

	while ((c = getopt_long(argc, argv, "d:q:e:c:b:l:n:m:i:g:t:vhV", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd':
				opt.dsn = optarg;
				break;
			case 'q':
				opt.queue = optarg;
				break;
			case 'e':
				opt.exec = optarg;
				break;
			case 'c':
				if (!parse_long(optarg, 1, MAX_CONCURRENCY, &v))
					die_usage("invalid --concurrency \"%s\": give a whole number from 1 to %d",
							  optarg, MAX_CONCURRENCY);
				opt.concurrency = (int) v;
				break;
			case 'b':
				if (!parse_long(optarg, 1, MAX_BATCH, &v))
					die_usage("invalid --batch \"%s\": give a whole number from 1 to %d",
							  optarg, MAX_BATCH);
				opt.batch = (int) v;
				break;
			case 'l':
				opt.lease = optarg;
				break;
			case 'n':
				if (optarg[0] == '\0' || strlen(optarg) > 200)
					die_usage("invalid --name: give 1 to 200 characters");
				opt.name = optarg;
				break;
			case 'm':
				if (!parse_long(optarg, 1, 1000000000L, &v))
					die_usage("invalid --max-items \"%s\": give a positive whole number", optarg);
				opt.max_items = v;
				break;
			case 'i':
				if (!parse_duration(optarg, &opt.idle_exit) || opt.idle_exit <= 0)
					die_usage("invalid --idle-exit \"%s\": give a positive duration such as 30s or 5min", optarg);
				break;
			case 'g':
				if (!parse_duration(optarg, &opt.grace))
					die_usage("invalid --grace \"%s\": give a duration such as 30s", optarg);
				break;
			case 't':
				if (!parse_duration(optarg, &opt.timeout) || opt.timeout <= 0)
					die_usage("invalid --timeout \"%s\": give a positive duration such as 10min", optarg);
				break;
			case 1:
				if (!parse_duration(optarg, &opt.poll) || opt.poll < 0.05)
					die_usage("invalid --poll \"%s\": give a duration of at least 50ms, such as 5s", optarg);
				break;
			case 2:
				if (!parse_duration(optarg, &opt.poll_max) || opt.poll_max < 0.05)
					die_usage("invalid --poll-max \"%s\": give a duration of at least 50ms, such as 30s", optarg);
				break;
			case 3:
				if (!parse_duration(optarg, &opt.heartbeat) || opt.heartbeat < 0.1)
					die_usage("invalid --heartbeat \"%s\": give a duration of at least 100ms", optarg);
				break;
			case 4:
				opt.listen = false;
				break;
			case 'v':
				opt.verbose = true;
				break;
			case 'h':
				usage();
				exit(0);
			case 'V':
				printf("queue-worker %s\n", QW_VERSION);
				exit(0);
			default:
				fprintf(stderr, "Try \"%s --help\" for more information.\n", progname);
				exit(2);
		}
	}
	if (optind < argc)
		die_usage("unexpected argument \"%s\" (quote the --exec command as one argument)", argv[optind]);
	if (opt.queue == NULL)
		die_usage("--queue is required: name the queue to consume");
	if (!valid_queue_name(opt.queue))
		die_usage("invalid --queue \"%s\": queue names are a lower-case letter, then up to 46 lower-case letters, digits or underscores",
				  opt.queue);
	if (opt.exec == NULL || opt.exec[0] == '\0')
		die_usage("--exec is required: give the command to run for each item");
	if (opt.poll_max < opt.poll)
		opt.poll_max = opt.poll;
}

/*
 * A command made only of plain words (no quotes, variables, redirections,
 * globs or other shell syntax) whose first word is a path, such as
 * "./process.sh --fast", means the same with or without a shell, so it is
 * run directly: one fork and exec less per item.  Anything else goes
 * through /bin/sh -c.
 */
static void
split_simple_command(void)
{
	const char *allowed = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		"0123456789_./-+=:,@% ";
	char	   *copy;
	int			n = 0;

	if (opt.exec[strspn(opt.exec, allowed)] != '\0')
		return;
	copy = xstrdup(opt.exec);
	exec_argv = xmalloc(sizeof(char *) * (strlen(copy) / 2 + 2));
	for (char *w = strtok(copy, " "); w; w = strtok(NULL, " "))
		exec_argv[n++] = w;
	exec_argv[n] = NULL;
	/*
	 * Only a program named by a path: a bare first word could be a shell
	 * built-in or keyword (exec, cd, if ...), and NAME=value an assignment.
	 */
	if (n == 0 || strchr(exec_argv[0], '/') == NULL || strchr(exec_argv[0], '='))
	{
		free(exec_argv);
		free(copy);
		exec_argv = NULL;
	}
}

/* Connect and check the extension, the queue and the lease. */
static void
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
	register_worker();
}

/* ---------------------------------------------------------------------
 * main loop
 * ---------------------------------------------------------------------
 */

int
main(int argc, char **argv)
{
	double		next_claim = 0;
	double		next_heartbeat;
	double		last_work;
	double		poll_delay;
	long		claimed_budget;
	int			exit_code = 0;

	setvbuf(stderr, NULL, _IOLBF, 0);
	parse_args(argc, argv);

	if (opt.name)
		snprintf(worker_name, sizeof(worker_name), "%s", opt.name);
	else
	{
		char		host[200] = "worker";

		gethostname(host, sizeof(host) - 1);
		host[strcspn(host, ".")] = '\0';
		snprintf(worker_name, sizeof(worker_name), "%s-%d", host, (int) getpid());
	}
	sanitize_utf8(worker_name, strlen(worker_name));

	nitems = opt.concurrency + (opt.batch > opt.concurrency ? opt.batch : 0);
	items = calloc(nitems, sizeof(Item));
	if (items == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		exit(1);
	}
	for (int i = 0; i < nitems; i++)
		item_free(&items[i]);

	setup_signals();
	split_simple_command();
	startup_checks();

	start_time = now_mono();
	last_work = start_time;
	next_heartbeat = start_time + opt.heartbeat;
	poll_delay = opt.poll;
	claimed_budget = opt.max_items;
	log_msg("consuming queue \"%s\" with up to %d command(s) at once (lease %.0f s%s%s)",
			opt.queue, opt.concurrency, lease_secs,
			opt.max_items ? ", bounded by --max-items" : "",
			opt.idle_exit > 0 ? ", bounded by --idle-exit" : "");

	for (;;)
	{
		struct pollfd pfds[2 + 2 * MAX_CONCURRENCY];
		Item	   *owner[2 + 2 * MAX_CONCURRENCY];
		int			npfd = 0;
		double		t = now_mono();
		double		wake = t + 60.0;
		bool		claim_allowed;
		int			running,
					waiting,
					held;
		bool		notified = false;

		/* -- start waiting items in free slots -- */
		running = count_state(IT_RUNNING);
		for (int i = 0; i < nitems && running < opt.concurrency && !shutting_down; i++)
			if (items[i].state == IT_WAITING)
			{
				if (item_start(&items[i]))
					running++;
				else
				{
					/* could not even start: give the item back */
					items[i].state = IT_REPORT;
					items[i].outcome = OUT_RELEASE;
				}
			}

		/* -- deliver reports, keep leases, heartbeat -- */
		if (conn == NULL && t >= next_connect)
			try_connect();
		if (conn)
		{
			for (int i = 0; i < nitems && conn; i++)
			{
				if (items[i].state == IT_REPORT)
					item_report(&items[i]);
				else if (items[i].state == IT_RUNNING && items[i].ncheckpoints > 0)
					item_send_checkpoints(&items[i]);
			}
			if (conn)
				extend_leases();
			if (conn && now_mono() >= next_heartbeat)
			{
				const char *vals[1] = {worker_name};

				if (run_query("heartbeat", "SELECT queue.heartbeat($1)", 1, vals, NULL, NULL) != Q_RETRY)
					next_heartbeat = now_mono() + opt.heartbeat;
			}
		}

		/* -- timeouts and the end of the grace period -- */
		t = now_mono();
		for (int i = 0; i < nitems; i++)
		{
			Item	   *it = &items[i];

			if (it->state != IT_RUNNING || it->reaped)
				continue;
			if (opt.timeout > 0 && !it->timed_out && !it->lost &&
				t - it->started_at >= opt.timeout)
			{
				log_msg("item %s ran past --timeout (%.0f s); stopping the command", it->id, opt.timeout);
				it->timed_out = true;
				item_kill(it, SIGTERM);
				it->kill_at = t + KILL_WAIT;
			}
			if (shutting_down && t >= grace_until && !it->stopping && !it->lost)
			{
				log_msg("item %s still running at the end of the grace period; stopping it and releasing the item",
						it->id);
				it->stopping = true;
				item_kill(it, SIGTERM);
				it->kill_at = t + KILL_WAIT;
			}
			if (it->kill_at > 0 && t >= it->kill_at)
			{
				item_kill(it, SIGKILL);
				it->kill_at = 0;
			}
		}

		/* -- claim -- */
		running = count_state(IT_RUNNING);
		waiting = count_state(IT_WAITING);
		held = count_held();
		claim_allowed = !shutting_down && !fatal_error && conn != NULL &&
			waiting == 0 && running < opt.concurrency &&
			(opt.max_items == 0 || claimed_budget > 0);
		if (claim_allowed && t >= next_claim)
		{
			int			free_slots = nitems - held;
			int			want = opt.batch ? opt.batch : opt.concurrency - running;
			char		sqlstate[6];
			int			got;

			if (want > free_slots)
				want = free_slots;
			if (opt.max_items && want > claimed_budget)
				want = (int) claimed_budget;
			got = want > 0 ? claim(want, sqlstate) : 0;
			if (got > 0)
			{
				claimed_budget -= got;
				last_work = now_mono();
				poll_delay = opt.poll;
				/*
				 * Ask again as soon as a slot is free: a short batch may
				 * just mean a capacity limit; only an empty one means the
				 * queue is drained.
				 */
				next_claim = 0;
				continue;
			}
			if (got < 0 && (!strcmp(sqlstate, "42704") || !strcmp(sqlstate, "42501") ||
							!strcmp(sqlstate, "22023") || !strcmp(sqlstate, "22004")))
			{
				log_msg("cannot claim from queue \"%s\"; stopping", opt.queue);
				fatal_error = true;
				exit_code = 1;
				begin_shutdown(0);
				grace_until = now_mono() + opt.grace;
			}
			else if (got == 0 && conn)
			{
				/* empty: if the queue is paused, back off */
				const char *vals[1] = {opt.queue};
				PGresult   *res;

				if (run_query("checking the queue",
							  "SELECT paused FROM queue.queues WHERE queue_name = $1",
							  1, vals, &res, NULL) == Q_OK)
				{
					bool		paused = PQntuples(res) > 0 && PQgetvalue(res, 0, 0)[0] == 't';

					PQclear(res);
					if (paused)
						poll_delay = fmin(poll_delay * 2, opt.poll_max);
					else
						poll_delay = opt.poll;
				}
				next_claim = now_mono() + poll_delay;
			}
			else
				next_claim = now_mono() + poll_delay;
		}

		/* -- exit conditions -- */
		held = count_held();
		if (held == 0)
		{
			if (shutting_down)
				break;
			if (opt.max_items && claimed_budget <= 0)
			{
				log_msg("--max-items %ld reached", opt.max_items);
				break;
			}
			if (opt.idle_exit > 0 && now_mono() - last_work >= opt.idle_exit)
			{
				log_msg("no work for %.0f s (--idle-exit)", opt.idle_exit);
				break;
			}
		}
		else
			last_work = now_mono();
		if (shutting_down && conn == NULL && count_state(IT_RUNNING) == 0 &&
			now_mono() >= grace_until + 5.0)
		{
			log_msg("database unreachable at shutdown; leaving %d item(s) to lease expiry", held);
			totals.unreported += held;
			break;
		}

		/* -- wait for something to happen -- */
		if (conn)
		{
			PGnotify   *nt;

			/* notifications read while a query ran */
			while ((nt = PQnotifies(conn)) != NULL)
			{
				notified = true;
				PQfreemem(nt);
			}
			if (notified)
				next_claim = 0;
			notified = false;
		}
		t = now_mono();
		claim_allowed = !shutting_down && !fatal_error && conn != NULL &&
			count_state(IT_WAITING) == 0 && count_state(IT_RUNNING) < opt.concurrency &&
			count_held() < nitems && (opt.max_items == 0 || claimed_budget > 0);
		if (claim_allowed)
			wake = fmin(wake, fmax(next_claim, t));
		if (conn)
			wake = fmin(wake, next_heartbeat);
		else
			wake = fmin(wake, next_connect);
		if (opt.idle_exit > 0 && held == 0)
			wake = fmin(wake, last_work + opt.idle_exit);
		if (shutting_down)
			wake = fmin(wake, fmax(grace_until, t + 0.05));
		for (int i = 0; i < nitems; i++)
		{
			Item	   *it = &items[i];

			if (it->state == IT_WAITING || it->state == IT_RUNNING)
				wake = fmin(wake, it->next_extend);
			if (it->state == IT_RUNNING)
			{
				if (opt.timeout > 0 && !it->timed_out)
					wake = fmin(wake, it->started_at + opt.timeout);
				if (it->kill_at > 0)
					wake = fmin(wake, it->kill_at);
				if (it->reaped)
					wake = fmin(wake, it->reaped_at + PIPE_WAIT);
				if (it->out_fd >= 0)
				{
					pfds[npfd].fd = it->out_fd;
					pfds[npfd].events = POLLIN;
					owner[npfd++] = it;
				}
				if (it->err_fd >= 0)
				{
					pfds[npfd].fd = it->err_fd;
					pfds[npfd].events = POLLIN;
					owner[npfd++] = it;
				}
			}
			if (it->state == IT_REPORT)
				wake = fmin(wake, t + 1.0);
		}
		pfds[npfd].fd = sigpipe_fds[0];
		pfds[npfd].events = POLLIN;
		owner[npfd++] = NULL;
		if (conn)
		{
			pfds[npfd].fd = PQsocket(conn);
			pfds[npfd].events = POLLIN;
			owner[npfd++] = NULL;
		}

		{
			int			ms = (int) ceil(fmax(0, wake - now_mono()) * 1000.0);
			int			rc = poll(pfds, npfd, ms);

			if (rc < 0 && errno != EINTR)
			{
				log_msg("poll: %s", strerror(errno));
				exit_code = 1;
				break;
			}
		}

		for (int k = 0; k < npfd; k++)
		{
			if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (owner[k])
			{
				Item	   *it = owner[k];

				if (pfds[k].fd == it->out_fd)
					item_read(it, &it->out_fd, true);
				else if (pfds[k].fd == it->err_fd)
					item_read(it, &it->err_fd, false);
			}
			else if (pfds[k].fd == sigpipe_fds[0])
			{
				char		sigs[64];
				ssize_t		n;

				while ((n = read(sigpipe_fds[0], sigs, sizeof(sigs))) > 0)
					for (ssize_t j = 0; j < n; j++)
					{
						if (sigs[j] == SIGCHLD)
							reap_children();
						else if (sigs[j] == SIGTERM || sigs[j] == SIGINT || sigs[j] == SIGHUP)
							begin_shutdown(sigs[j]);
					}
			}
			else if (conn && pfds[k].fd == PQsocket(conn))
			{
				if (!PQconsumeInput(conn))
				{
					char		msg[256];

					snprintf(msg, sizeof(msg), "%s", PQerrorMessage(conn));
					msg[strcspn(msg, "\n")] = '\0';
					disconnect(msg);
				}
			}
		}
		if (conn)
		{
			PGnotify   *nt;

			while ((nt = PQnotifies(conn)) != NULL)
			{
				notified = true;
				PQfreemem(nt);
			}
		}
		if (notified)
			next_claim = 0;

		/* SIGCHLD may race with the pipe read; reaping is cheap */
		reap_children();

		/* -- finished commands -- */
		t = now_mono();
		for (int i = 0; i < nitems; i++)
		{
			Item	   *it = &items[i];

			if (it->state != IT_RUNNING || !it->reaped)
				continue;
			if ((it->out_fd >= 0 || it->err_fd >= 0) && t < it->reaped_at + PIPE_WAIT)
			{
				/* drain what is left; a grandchild may hold the pipe open */
				if (it->out_fd >= 0)
					item_read(it, &it->out_fd, true);
				if (it->err_fd >= 0)
					item_read(it, &it->err_fd, false);
				if (it->out_fd >= 0 || it->err_fd >= 0)
					continue;
			}
			if (it->out_fd >= 0)
			{
				close(it->out_fd);
				it->out_fd = -1;
			}
			if (it->err_fd >= 0)
			{
				close(it->err_fd);
				it->err_fd = -1;
			}
			item_decide(it);
		}
	}

	{
		double		secs = now_mono() - start_time;
		long		finished = totals.completed + totals.retrying + totals.dead;

		log_msg("summary: claimed %ld, completed %ld, failed %ld (retrying %ld, dead %ld), "
				"lost lease %ld, released %ld, refused as stale %ld, unreported %ld; "
				"%.1f s, %.2f items/s",
				totals.claimed, totals.completed, totals.retrying + totals.dead,
				totals.retrying, totals.dead, totals.lost, totals.released, totals.stale,
				totals.unreported, secs, secs > 0 ? finished / secs : 0.0);
	}
	if (conn)
		PQfinish(conn);
	return exit_code;
}
