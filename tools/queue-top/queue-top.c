/*-------------------------------------------------------------------------
 *
 * queue-top.c
 *		A live terminal view of the queues, workers, health and alerts.
 *
 * queue-top polls the read-only side of the `queue` extension every
 * --interval seconds: queue.stats(), queue.health(), the queue.workers
 * view, open rows of queue.alerts, and completions and failures over the
 * last minute (queue.history, queue.events) for throughput.  It draws
 * with plain ANSI escape codes (no curses) and reads single keys from a
 * terminal in non-canonical mode: q quits, r or space refreshes now.
 * --once prints one plain frame without escape codes and exits, which is
 * what scripts and tests use; with no terminal on stdout (a file, a pipe)
 * every refresh is such a plain frame.
 *
 * The workers view's columns are shown as the server defines them, so a
 * column added later appears without a change here.  Every statement is
 * a constant string; the optional --queue filter travels as a parameter.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"
#include "sanitize.h"

#ifndef QT_VERSION
#define QT_VERSION "0.1.0"
#endif

#define MAX_ROWS_WORKERS	20	/* workers listed per frame */
#define MAX_ROWS_ALERTS		10	/* open alerts listed per frame */
#define MAX_ROWS_LIMITS		10	/* limit keys listed per frame */
#define WORKER_COL_MIN		20	/* worker name column, in characters */
#define WORKER_COL_MAX		40

/* Output assembled for one frame. */
typedef struct Frame
{
	char	   *data;			/* text of the frame */
	size_t		len;			/* bytes used */
	size_t		cap;			/* bytes allocated */
	int			width;			/* terminal columns, lines are cut there */
	int			rows;			/* terminal rows, 0: no limit (plain frames) */
	int			lines;			/* lines in the frame so far */
	int			dropped;		/* lines left out for want of rows */
	bool		color;			/* ANSI colours on */
} Frame;

static const char *progname = "queue-top";
static const char *dsn = "";
static const char *queue_filter = NULL;
static double interval = 2.0;
static bool once = false;
static bool plain = false;		/* no escape codes: --once, or no terminal */
static bool use_color = true;
static PGconn *conn;
static struct termios saved_tty;
static bool tty_raw = false;
static volatile sig_atomic_t got_signal = 0;
static volatile sig_atomic_t got_winch = 0;	/* the terminal was resized */
static volatile sig_atomic_t got_tstp = 0;	/* Ctrl-Z: suspend the view */
static bool output_gone = false;	/* stdout can no longer be written */
static bool query_failed = false;	/* some section could not be shown */

/* ---------------------------------------------------------------------
 * frame output
 * ---------------------------------------------------------------------
 */

static void
frame_raw(Frame *f, const char *s, size_t n)
{
	if (f->len + n + 1 > f->cap)
	{
		size_t		ncap = f->cap ? f->cap * 2 : 8192;

		while (ncap < f->len + n + 1)
			ncap *= 2;
		f->data = realloc(f->data, ncap);
		if (f->data == NULL)
		{
			fprintf(stderr, "%s: out of memory\n", progname);
			exit(1);
		}
		f->cap = ncap;
	}
	memcpy(f->data + f->len, s, n);
	f->len += n;
	f->data[f->len] = '\0';
}

/*
 * The bytes of the first `width` columns of a sanitized line: a UTF-8
 * character counts one column and is never cut in half.
 */
static size_t
cut_columns(const char *s, size_t n, int width)
{
	int			cols = 0;

	for (size_t i = 0; i < n; i++)
	{
		if (((unsigned char) s[i] & 0xC0) == 0x80)
			continue;			/* a continuation byte */
		if (cols == width)
			return i;
		cols++;
	}
	return n;
}

/*
 * Append one line, cut to the terminal width (escape codes not counted).
 * The text is made harmless here, in one place: colours and cursor codes
 * are added around it with frame_raw, never through the format.
 */
static void
frame_line(Frame *f, const char *color, const char *fmt,...)
	__attribute__((format(printf, 3, 4)));

static void
frame_line(Frame *f, const char *color, const char *fmt,...)
{
	char		raw[4096];
	char		buf[sizeof(raw) * TERM_SANITIZE_GROWTH];
	va_list		ap;
	size_t		n;

	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	/* every value in a line may come from the database: show controls */
	n = term_sanitize(buf, sizeof(buf), raw, strlen(raw));
	/* the last row stays free: a newline there would scroll the frame */
	if (f->rows > 0 && f->lines >= f->rows - 2 && f->dropped >= 0)
	{
		f->dropped++;
		return;
	}
	f->lines++;
	if (f->width > 0)
		n = cut_columns(buf, n, f->width);
	if (f->color && color)
		frame_raw(f, color, strlen(color));
	frame_raw(f, buf, n);
	if (f->color && color)
		frame_raw(f, "\033[0m", 4);
	if (f->color)
		frame_raw(f, "\033[K", 3);	/* clear the rest of the line */
	frame_raw(f, "\n", 1);
}

#define C_BOLD	"\033[1m"
#define C_DIM	"\033[2m"
#define C_RED	"\033[31m"
#define C_GREEN	"\033[32m"
#define C_YELLOW "\033[33m"
#define C_CYAN	"\033[36m"

/* Seconds as a short human duration. */
static void
fmt_secs(char *out, size_t n, const char *val, bool isnull)
{
	double		s;

	if (isnull)
	{
		snprintf(out, n, "-");
		return;
	}
	s = atof(val);
	if (s < 1.0)
		snprintf(out, n, "%.0fms", s * 1000);
	else if (s < 60)
		snprintf(out, n, "%.1fs", s);
	else if (s < 3600)
		snprintf(out, n, "%dm%02ds", (int) s / 60, (int) s % 60);
	else if (s < 86400)
		snprintf(out, n, "%dh%02dm", (int) s / 3600, ((int) s % 3600) / 60);
	else
		snprintf(out, n, "%dd%02dh", (int) (s / 86400), ((int) fmod(s, 86400)) / 3600);
}

static const char *
status_color(const char *status)
{
	if (!strcmp(status, "ok") || !strcmp(status, "active"))
		return C_GREEN;
	if (!strcmp(status, "warning") || !strcmp(status, "paused") ||
		!strcmp(status, "draining") || !strcmp(status, "maintenance"))
		return C_YELLOW;
	if (!strcmp(status, "critical") || !strcmp(status, "offline"))
		return C_RED;
	return NULL;
}

/* ---------------------------------------------------------------------
 * queries
 * ---------------------------------------------------------------------
 */

static PGresult *
query(Frame *f, const char *what, const char *sql, int nparams)
{
	const char *vals[1] = {queue_filter};
	PGresult   *r = PQexecParams(conn, sql, nparams, NULL, vals, NULL, NULL, 0);

	if (PQresultStatus(r) != PGRES_TUPLES_OK)
	{
		char		msg[512];

		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(conn));
		msg[strcspn(msg, "\n")] = '\0';
		frame_line(f, C_RED, "  (%s unavailable: %s)", what, msg);
		query_failed = true;
		PQclear(r);
		return NULL;
	}
	return r;
}

/* The characters of a UTF-8 string (bytes that are no continuation byte). */
static int
utf8_chars(const char *s)
{
	int			n = 0;

	for (; *s; s++)
		if (((unsigned char) *s & 0xC0) != 0x80)
			n++;
	return n;
}

/* The byte offset of character number `nth` (from 0) of s, or its end. */
static size_t
utf8_offset(const char *s, int nth)
{
	size_t		i;
	int			n = 0;

	for (i = 0; s[i]; i++)
		if (((unsigned char) s[i] & 0xC0) != 0x80 && n++ == nth)
			return i;
	return i;
}

/*
 * A name in `width` columns: a longer one keeps its start and its end
 * around a '~', so that names that differ at their end (queues of one
 * family, the host-pid names of one deployment's pods) stay apart.  A
 * UTF-8 character counts one column and is never cut in half.  buf holds
 * any name of `width` characters with 4 * width + 1 bytes (queue names are
 * ASCII: width + 1).
 */
static const char *
fit_name(char *buf, size_t size, const char *name, int width)
{
	int			len = utf8_chars(name);
	int			tail = width / 3;
	size_t		head_end;

	if (len <= width)
		return name;
	head_end = utf8_offset(name, width - tail - 1);
	snprintf(buf, size, "%.*s~%s", (int) head_end, name, name + utf8_offset(name, len - tail));
	return buf;
}

static void
draw_queues(Frame *f)
{
	PGresult   *r;

	frame_line(f, C_BOLD C_CYAN, "%-20s %8s %6s %5s %5s %5s %8s %8s %7s %15s %15s %6s %6s  %s",
			   "QUEUE", "queued", "sched", "proc", "hold", "dead", "oldest",
			   "done/1h", "fail/1h", "wait p50/p95", "run p50/p95", "done/m", "fail/m", "state");
	r = query(f, "stats",
			  "WITH s AS (SELECT * FROM queue.stats($1::text)),"
			  " done AS (SELECT h.queue_name, count(*) AS n FROM queue.history h"
			  "          WHERE h.completed_at > pg_catalog.now() - interval '1 min'"
			  "            AND ($1::text IS NULL OR h.queue_name = $1::text) GROUP BY 1),"
			  " failed AS (SELECT e.queue_name, count(*) AS n FROM queue.events e"
			  "            WHERE e.kind = 'failed' AND e.at > pg_catalog.now() - interval '1 min'"
			  "              AND ($1::text IS NULL OR e.queue_name = $1::text) GROUP BY 1)"
			  " SELECT s.queue_name, s.queued, s.scheduled, s.processing, s.on_hold, s.dead,"
			  "  extract(epoch FROM s.oldest_queued_age)::float8,"
			  "  s.processed_1h, s.failed_1h,"
			  "  extract(epoch FROM s.wait_p50)::float8, extract(epoch FROM s.wait_p95)::float8,"
			  "  extract(epoch FROM s.run_p50)::float8, extract(epoch FROM s.run_p95)::float8,"
			  "  s.paused, coalesce(d.n, 0),"
			  "  CASE WHEN q.audit = 'none' THEN '-' ELSE coalesce(x.n, 0)::text END"
			  " FROM s LEFT JOIN done d USING (queue_name) LEFT JOIN failed x USING (queue_name)"
			  " LEFT JOIN queue.queues q USING (queue_name)"
			  " ORDER BY s.queue_name", 1);
	if (r == NULL)
		return;
	if (PQntuples(r) == 0)
	{
		/*
		 * An admin sees every queue; anyone else only those open to it: a
		 * queue whose reader grants name other roles is there all the same
		 * (the same reading as queue-worker's for a closed queue).
		 */
		PGresult   *a = query(f, "roles",
							  "SELECT pg_catalog.pg_has_role('queue_admin', 'MEMBER')", 0);
		bool		admin = a && PQntuples(a) == 1 && PQgetvalue(a, 0, 0)[0] == 't';

		if (a)
			PQclear(a);
		if (admin)
			frame_line(f, C_DIM, "  (no queues yet: create one with SELECT queue.create_queue('name'))");
		else
			frame_line(f, C_DIM, "  (no queue is open to this database user: there is none yet, or its "
					   "reader grants name other roles; a queue_admin can run queue.grant_queue)");
	}
	for (int i = 0; i < PQntuples(r); i++)
	{
		char		oldest[16],
					w50[16],
					w95[16],
					r50[16],
					r95[16],
					wait[40],
					run[40],
					name[32];
		bool		paused = PQgetvalue(r, i, 13)[0] == 't';

		fmt_secs(oldest, sizeof(oldest), PQgetvalue(r, i, 6), PQgetisnull(r, i, 6));
		fmt_secs(w50, sizeof(w50), PQgetvalue(r, i, 9), PQgetisnull(r, i, 9));
		fmt_secs(w95, sizeof(w95), PQgetvalue(r, i, 10), PQgetisnull(r, i, 10));
		fmt_secs(r50, sizeof(r50), PQgetvalue(r, i, 11), PQgetisnull(r, i, 11));
		fmt_secs(r95, sizeof(r95), PQgetvalue(r, i, 12), PQgetisnull(r, i, 12));
		snprintf(wait, sizeof(wait), "%s/%s", w50, w95);
		snprintf(run, sizeof(run), "%s/%s", r50, r95);
		frame_line(f, paused ? C_YELLOW : NULL,
				   "%-20.20s %8s %6s %5s %5s %5s %8s %8s %7s %15s %15s %6s %6s  %s",
				   fit_name(name, sizeof(name), PQgetvalue(r, i, 0), 20),
				   PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
				   PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5),
				   oldest, PQgetvalue(r, i, 7), PQgetvalue(r, i, 8), wait, run,
				   PQgetvalue(r, i, 14), PQgetvalue(r, i, 15),
				   paused ? "PAUSED" : "running");
	}
	PQclear(r);
}

static void
draw_health(Frame *f)
{
	PGresult   *r;

	frame_line(f, NULL, "%s", "");
	frame_line(f, C_BOLD C_CYAN, "%-20s %-9s %s", "HEALTH", "status", "reasons");
	r = query(f, "health",
			  "SELECT queue_name, status, pg_catalog.array_to_string(reasons, '; ')"
			  " FROM queue.health($1::text) ORDER BY queue_name", 1);
	if (r == NULL)
		return;
	for (int i = 0; i < PQntuples(r); i++)
	{
		char		name[32];

		frame_line(f, status_color(PQgetvalue(r, i, 1)), "%-20.20s %-9s %s",
				   fit_name(name, sizeof(name), PQgetvalue(r, i, 0), 20),
				   PQgetvalue(r, i, 1), PQgetvalue(r, i, 2));
	}
	PQclear(r);
}

/*
 * An interval as text ("00:01:02.5", "1 day 02:00:00") in seconds, when it
 * is a plain time of day; false if it has other parts.
 */
static bool
interval_secs(const char *v, double *out)
{
	int			h,
				m;
	double		s;
	int			used = 0;

	if (sscanf(v, "%d:%d:%lf%n", &h, &m, &s, &used) == 3 && v[used] == '\0')
	{
		*out = h * 3600.0 + m * 60.0 + s;
		return true;
	}
	return false;
}

#define JSONBOID		3802
#define INTERVALOID		1186
#define TIMESTAMPTZOID	1184

/* The workers view, whatever columns it has (jsonb details left out). */
static void
draw_workers(Frame *f)
{
	PGresult   *r;
	int			nf;
	int			widths[32];
	int			statuscol = -1;
	char		line[4096];

	frame_line(f, NULL, "%s", "");
	/*
	 * Working workers first, offline ones last: the names of processes
	 * that are gone (host-pid names, one per start) stay for days and
	 * would otherwise push the live ones out of the rows shown.  With
	 * --queue: the workers registered for it, those holding its items,
	 * and those registered for every queue (queues NULL, as a first
	 * dequeue registers a bot) that worked it in the last day.
	 */
	r = query(f, "workers",
			  "SELECT * FROM queue.workers w"
			  " WHERE $1::text IS NULL OR $1::text = ANY (w.queues)"
			  "    OR EXISTS (SELECT 1 FROM queue.items i"
			  "                WHERE i.queue_name = $1::text AND i.worker = w.worker)"
			  "    OR (w.queues IS NULL"
			  "        AND (EXISTS (SELECT 1 FROM queue.history h"
			  "                      WHERE h.queue_name = $1::text AND h.worker = w.worker"
			  "                        AND h.completed_at > pg_catalog.now() - interval '1 day')"
			  "             OR EXISTS (SELECT 1 FROM queue.events e"
			  "                         WHERE e.queue_name = $1::text AND e.worker = w.worker"
			  "                           AND e.at > pg_catalog.now() - interval '1 day')))"
			  " ORDER BY CASE pg_catalog.to_jsonb(w) ->> 'status' WHEN 'active' THEN 0"
			  "          WHEN 'idle' THEN 2 WHEN 'offline' THEN 3 ELSE 1 END, 1 LIMIT 200", 1);
	if (r == NULL)
		return;
	nf = PQnfields(r);
	if (nf > 32)
		nf = 32;
	for (int c = 0; c < nf; c++)
	{
		if (c == 0)
		{
			/* the names, whole where they fit (the first column is the worker) */
			widths[0] = WORKER_COL_MIN;
			for (int i = 0; i < PQntuples(r) && i < MAX_ROWS_WORKERS; i++)
			{
				int			w = utf8_chars(PQgetvalue(r, i, 0));

				if (w > widths[0])
					widths[0] = w > WORKER_COL_MAX ? WORKER_COL_MAX : w;
			}
			continue;
		}
		widths[c] = strlen(PQfname(r, c));
		if (!strcmp(PQfname(r, c), "status"))
			statuscol = c;
		if (PQftype(r, c) == JSONBOID)
		{
			widths[c] = -1;
			continue;
		}
		for (int i = 0; i < PQntuples(r) && i < MAX_ROWS_WORKERS; i++)
		{
			int			w = PQgetlength(r, i, c);

			if (PQftype(r, c) == TIMESTAMPTZOID)	/* shown as hh:mm:ss */
				w = 8;
			if (PQftype(r, c) == INTERVALOID)	/* shown like 1.2s */
				w = 7;
			if (w > widths[c])
				widths[c] = w > 30 ? 30 : w;
		}
	}
	{
		size_t		pos;

		pos = snprintf(line, sizeof(line), "%-*s", widths[0], "WORKER");
		for (int c = 1; c < nf && pos < sizeof(line) - 40; c++)
			if (widths[c] >= 0)
				pos += snprintf(line + pos, sizeof(line) - pos, " %-*.*s",
								widths[c], widths[c], PQfname(r, c));
		frame_line(f, C_BOLD C_CYAN, "%s", line);
	}
	if (PQntuples(r) == 0)
		frame_line(f, C_DIM, "  (no workers seen yet)");
	for (int i = 0; i < PQntuples(r) && i < MAX_ROWS_WORKERS; i++)
	{
		char		name[4 * WORKER_COL_MAX + 1];
		const char *shown = fit_name(name, sizeof(name), PQgetvalue(r, i, 0), widths[0]);
		size_t		pos;

		/* padded by characters: printf's widths count bytes */
		pos = snprintf(line, sizeof(line), "%s%*s", shown,
					   widths[0] - utf8_chars(shown), "");
		for (int c = 1; c < nf && pos < sizeof(line) - 40; c++)
		{
			const char *v = PQgetisnull(r, i, c) ? "-" : PQgetvalue(r, i, c);
			char		t[16];
			double		secs;

			if (widths[c] < 0)
				continue;
			if (PQftype(r, c) == INTERVALOID && !PQgetisnull(r, i, c) && interval_secs(v, &secs))
			{
				char		num[32];

				snprintf(num, sizeof(num), "%f", secs);
				fmt_secs(t, sizeof(t), num, false);
				v = t;
			}

			/* timestamps: the time of day is enough on screen */
			if (PQftype(r, c) == TIMESTAMPTZOID && !PQgetisnull(r, i, c) && strlen(v) >= 19)
			{
				snprintf(t, sizeof(t), "%.8s", v + 11);
				v = t;
			}
			pos += snprintf(line + pos, sizeof(line) - pos, " %-*.*s",
							widths[c], widths[c], v);
		}
		frame_line(f, statuscol >= 0 ? status_color(PQgetvalue(r, i, statuscol)) : NULL,
				   "%s", line);
	}
	if (PQntuples(r) > MAX_ROWS_WORKERS)
		frame_line(f, C_DIM, "  ... and %d more", PQntuples(r) - MAX_ROWS_WORKERS);
	PQclear(r);
}

/*
 * Per-key caps and rates (the limits view), fullest first; left out where
 * the server has no flow control (before 0.2.0).
 */
static void
draw_limits(Frame *f)
{
	PGresult   *r;

	r = query(f, "limits",
			  "SELECT to_regclass('queue.limits') IS NOT NULL", 0);
	if (r == NULL)
		return;
	if (PQntuples(r) != 1 || strcmp(PQgetvalue(r, 0, 0), "t") != 0)
	{
		PQclear(r);
		return;
	}
	PQclear(r);
	frame_line(f, NULL, "%s", "");
	frame_line(f, C_BOLD C_CYAN, "%-20s %-20s %-11s %-16s %s", "LIMITS", "key", "in flight",
			   "claims/window", "next");
	r = query(f, "limits",
			  "SELECT queue_name, coalesce(limit_key, '(whole queue)'),"
			  "       in_flight || coalesce('/' || max_in_flight, ''),"
			  "       coalesce(claims_in_window || '/' || rate || ' per ' || per, '-'),"
			  "       CASE WHEN ready_at <= now() THEN 'ready'"
			  "            WHEN ready_at = 'infinity' THEN '-'"
			  "            ELSE to_char(ready_at, 'HH24:MI:SS') END,"
			  "       (max_in_flight IS NOT NULL AND in_flight >= max_in_flight)"
			  "         OR (rate IS NOT NULL AND claims_in_window >= rate),"
			  "       count(*) OVER ()"
			  "  FROM queue.limits"
			  " WHERE ($1::text IS NULL OR queue_name = $1::text)"
			  " ORDER BY 6 DESC, in_flight DESC, queue_name, limit_key LIMIT 10", 1);
	if (r == NULL)
		return;
	if (PQntuples(r) == 0)
		frame_line(f, C_DIM, "  (none)");
	for (int i = 0; i < PQntuples(r); i++)
	{
		char		name[32];

		frame_line(f, strcmp(PQgetvalue(r, i, 5), "t") == 0 ? C_YELLOW : NULL,
				   "%-20.20s %-20.20s %-11s %-16s %s",
				   fit_name(name, sizeof(name), PQgetvalue(r, i, 0), 20), PQgetvalue(r, i, 1),
				   PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
	}
	if (PQntuples(r) > 0 && atoi(PQgetvalue(r, 0, 6)) > MAX_ROWS_LIMITS)
		frame_line(f, C_DIM, "  ... %d in all (SELECT * FROM queue.limits)",
				   atoi(PQgetvalue(r, 0, 6)));
	PQclear(r);
}

static void
draw_alerts(Frame *f)
{
	PGresult   *r;

	frame_line(f, NULL, "%s", "");
	frame_line(f, C_BOLD C_CYAN, "%-20s %-15s %-8s %s", "OPEN ALERTS", "kind", "raised", "message");
	r = query(f, "alerts",
			  "SELECT queue_name, kind, to_char(raised_at, 'HH24:MI:SS'), message, count(*) OVER ()"
			  " FROM queue.alerts WHERE cleared_at IS NULL"
			  "   AND ($1::text IS NULL OR queue_name = $1::text)"
			  " ORDER BY raised_at DESC LIMIT 10", 1);
	if (r == NULL)
		return;
	if (PQntuples(r) == 0)
		frame_line(f, C_DIM, "  (none)");
	for (int i = 0; i < PQntuples(r); i++)
	{
		const char *kind = PQgetvalue(r, i, 1);
		char		name[32];

		frame_line(f, strstr(kind, "critical") || strstr(kind, "breaker") ? C_RED : C_YELLOW,
				   "%-20.20s %-15s %-8s %s", fit_name(name, sizeof(name), PQgetvalue(r, i, 0), 20), kind,
				   PQgetvalue(r, i, 2), PQgetvalue(r, i, 3));
	}
	if (PQntuples(r) > 0 && atoi(PQgetvalue(r, 0, 4)) > MAX_ROWS_ALERTS)
		frame_line(f, C_DIM, "  ... %d open in all (SELECT * FROM queue.alerts WHERE cleared_at IS NULL)",
				   atoi(PQgetvalue(r, 0, 4)));
	PQclear(r);
}

/* ---------------------------------------------------------------------
 * terminal
 * ---------------------------------------------------------------------
 */

static void
tty_restore(void)
{
	if (tty_raw)
	{
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tty);
		tty_raw = false;
	}
	if (!plain)
		fputs("\033[?25h", stdout);	/* show the cursor again */
	fflush(stdout);
}

static void
tty_setup(void)
{
	struct termios t;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tty) != 0)
		return;
	t = saved_tty;
	t.c_lflag &= ~(ICANON | ECHO);
	t.c_cc[VMIN] = 0;
	t.c_cc[VTIME] = 0;
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) == 0)
		tty_raw = true;
}

static void
on_signal(int sig)
{
	got_signal = sig;
}

static void
on_winch(int sig)
{
	(void) sig;
	got_winch = 1;
}

static void
on_tstp(int sig)
{
	(void) sig;
	got_tstp = 1;
}

/* Catch sig with handler, without SA_RESTART: poll() returns EINTR. */
static void
catch_signal(int sig, void (*handler) (int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

/*
 * Ctrl-Z (SIGTSTP): give the terminal back as it was (echo, line input,
 * the cursor), stop, and after fg (SIGCONT) take it again for keys and a
 * fresh frame.  The settings are read again then: the shell may have
 * changed them meanwhile.
 */
static void
suspend_view(void)
{
	got_tstp = 0;
	tty_restore();
	signal(SIGTSTP, SIG_DFL);
	raise(SIGTSTP);
	/* continued */
	catch_signal(SIGTSTP, on_tstp);
	tty_setup();
	if (!plain)
		fputs("\033[2J\033[?25l", stdout);	/* clear, hide the cursor */
}

/* The terminal's columns and rows (0 when unknown). */
static void
term_size(int *cols, int *rows)
{
	struct winsize ws;

	*cols = *rows = 0;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0)
	{
		*cols = ws.ws_col;
		*rows = ws.ws_row;
	}
}

static bool
ensure_connection(Frame *f)
{
	if (conn && PQstatus(conn) == CONNECTION_OK)
		return true;
	if (conn)
		PQreset(conn);
	else
	{
		/*
		 * NB: client_encoding comes after dbname, so neither --dsn nor
		 * PGCLIENTENCODING overrides it: every line is shown as UTF-8
		 * (columns counted by UTF-8 characters, other bytes escaped).
		 */
		const char *keys[] = {"connect_timeout", "dbname", "client_encoding",
		"fallback_application_name", NULL};
		const char *vals[] = {"5", dsn, "UTF8", "queue-top", NULL};

		conn = PQconnectdbParams(keys, vals, 1);
	}
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
	{
		char		msg[512];

		snprintf(msg, sizeof(msg), "%s", conn ? PQerrorMessage(conn) : "out of memory");
		msg[strcspn(msg, "\n")] = '\0';
		frame_line(f, C_RED, "cannot connect to the database: %s", msg);
		frame_line(f, NULL, "Check --dsn (e.g. --dsn 'host=db1 dbname=app') or the PG* environment variables.");
		return false;
	}
	return true;
}

static bool
draw_frame(void)
{
	Frame		f = {0};
	time_t		now = time(NULL);
	char		stamp[32];
	bool		ok;

	f.color = use_color && !plain;
	if (!plain)
		term_size(&f.width, &f.rows);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", localtime(&now));
	if (!plain)
		frame_raw(&f, "\033[H", 3);
	query_failed = false;
	ok = ensure_connection(&f);
	frame_line(&f, C_BOLD, "queue-top %s  %s  %s%s%s  every %.1fs%s",
			   QT_VERSION, stamp,
			   conn && PQstatus(conn) == CONNECTION_OK ? PQdb(conn) : "",
			   queue_filter ? "  queue " : "", queue_filter ? queue_filter : "",
			   interval, once ? "" : "  (q quits, r refreshes)");
	frame_line(&f, NULL, "%s", "");
	if (ok)
	{
		draw_queues(&f);
		draw_health(&f);
		draw_workers(&f);
		draw_limits(&f);
		draw_alerts(&f);
		ok = !query_failed && PQstatus(conn) == CONNECTION_OK;
	}
	if (f.dropped > 0)
	{
		int			n = f.dropped;

		f.dropped = -1;			/* this line goes in whatever the rows */
		frame_line(&f, C_DIM, "(%d more line%s: a taller terminal or --queue NAME shows them)",
				   n, n == 1 ? "" : "s");
	}
	if (!plain)
		frame_raw(&f, "\033[J", 3);	/* clear below the frame */
	else if (!once)
		frame_raw(&f, "\n", 1);	/* a blank line between plain frames */
	fwrite(f.data, 1, f.len, stdout);
	if (fflush(stdout) != 0 || ferror(stdout))
		output_gone = true;		/* a closed pipe (| head) or a gone terminal */
	free(f.data);
	return ok;
}

/* ---------------------------------------------------------------------
 * main
 * ---------------------------------------------------------------------
 */

static void
usage(void)
{
	printf("queue-top shows queues, health, workers and alerts of the queue extension live.\n\n"
		   "Usage:\n"
		   "  queue-top [OPTION]...\n\n"
		   "Options:\n"
		   "  -d, --dsn CONNSTR      libpq connection string or URI (default: PG* environment)\n"
		   "  -q, --queue NAME       show only this queue\n"
		   "  -i, --interval SECS    refresh every SECS seconds (default 2)\n"
		   "  -1, --once             print one frame without escape codes and exit\n"
		   "      --no-color         no colours\n"
		   "  -h, --help             show this help and exit\n"
		   "  -V, --version          show the version and exit\n\n"
		   "Keys: q quits, r or space refreshes now.\n"
		   "The database user needs the queue_reader role.\n"
		   "Exit status: 0 normal end, 1 with --once when the frame could not be read in full, 2 usage error.\n");
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dsn", required_argument, NULL, 'd'},
		{"queue", required_argument, NULL, 'q'},
		{"interval", required_argument, NULL, 'i'},
		{"once", no_argument, NULL, '1'},
		{"no-color", no_argument, NULL, 1},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	while ((c = getopt_long(argc, argv, "d:q:i:1hV", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd':
				dsn = optarg;
				break;
			case 'q':
				queue_filter = optarg;
				break;
			case 'i':
				{
					char	   *end;

					errno = 0;
					interval = strtod(optarg, &end);
					if (end == optarg || (*end != '\0' && strcmp(end, "s") != 0) ||
						errno != 0 || !(interval >= 0.2 && interval <= 3600))
					{
						fprintf(stderr, "%s: invalid --interval \"%s\": give seconds from 0.2 to 3600, e.g. 2\n"
								"Try \"%s --help\" for more information.\n", progname, optarg, progname);
						exit(2);
					}
					break;
				}
			case '1':
				once = true;
				break;
			case 1:
				use_color = false;
				break;
			case 'h':
				usage();
				exit(0);
			case 'V':
				printf("queue-top %s\n", QT_VERSION);
				exit(0);
			default:
				fprintf(stderr, "Try \"%s --help\" for more information.\n", progname);
				exit(2);
		}
	}
	if (optind < argc)
	{
		fprintf(stderr, "%s: unexpected argument \"%s\"\nTry \"%s --help\" for more information.\n",
				progname, argv[optind], progname);
		exit(2);
	}
	/* no-color.org: NO_COLOR counts when present and not empty */
	if (!isatty(STDOUT_FILENO) || (getenv("NO_COLOR") && getenv("NO_COLOR")[0] != '\0'))
		use_color = false;
	plain = once || !isatty(STDOUT_FILENO);

	if (once)
	{
		bool		ok = draw_frame();

		if (conn)
			PQfinish(conn);
		return ok ? 0 : 1;
	}

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	/*
	 * A reader that goes away (queue-top | head) ends the view like q, with
	 * the terminal restored; SIGPIPE may also have been left ignored, so
	 * the failed write is checked too (output_gone).
	 */
	signal(SIGPIPE, on_signal);
	/* a resize redraws at once (poll() returns EINTR), not at the next tick */
	catch_signal(SIGWINCH, on_winch);
	catch_signal(SIGTSTP, on_tstp);
	tty_setup();
	atexit(tty_restore);
	if (!plain)
		fputs("\033[2J\033[?25l", stdout);	/* clear, hide the cursor */

	while (!got_signal && !output_gone)
	{
		struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
		double		until;
		struct timespec ts;
		bool		quit = false;

		draw_frame();
		if (output_gone)
			break;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		until = ts.tv_sec + ts.tv_nsec / 1e9 + interval;
		for (;;)
		{
			double		left;
			int			rc;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			left = until - (ts.tv_sec + ts.tv_nsec / 1e9);
			if (left <= 0 || got_signal)
				break;
			if (got_tstp)
			{
				suspend_view();
				break;
			}
			if (got_winch)
			{
				/* the old frame is the wrong shape now: clear, then redraw */
				got_winch = 0;
				if (!plain)
					fputs("\033[2J", stdout);
				break;
			}
			rc = poll(&p, tty_raw ? 1 : 0, (int) (left * 1000) + 1);
			if (rc > 0)
			{
				char		key;

				if (read(STDIN_FILENO, &key, 1) != 1)
				{
					p.fd = -1;	/* stdin closed: refresh on the timer only */
					continue;
				}
				if (key == 'q' || key == 'Q' || key == 3)
				{
					quit = true;
					break;
				}
				if (key == 'r' || key == ' ' || key == 12)
				{
					if (!plain)
						fputs("\033[2J", stdout);
					break;
				}
			}
		}
		if (quit)
			break;
	}
	if (!plain)
		fputs("\033[2J\033[H", stdout);
	if (conn)
		PQfinish(conn);
	return 0;
}
