/*-------------------------------------------------------------------------
 *
 * worker.h
 *		Types, settings and cross-file functions of queue-worker.
 *
 * queue-worker is split by phase; each file owns one side of the work:
 *
 *   queue-worker.c   the main loop: the item table, claiming, timers,
 *                    shutdown, waiting in poll(), the exit summary
 *   options.c        command line: parsing, validation, --help
 *   database.c       the libpq side: connecting, reconnecting, LISTEN,
 *                    register_worker, dequeue, lease extension and the
 *                    reports (complete, fail, release, checkpoint)
 *   child.c          the command side: fork and exec in a process group,
 *                    pipes, reading output, killing, reaping, signals,
 *                    and turning an exit status into an outcome
 *   json.c           a small JSON syntax checker
 *   util.c           logging, allocation, growable buffers, UTF-8 repair
 *
 * Only the main loop changes an item's state between waiting, running
 * and report; child.c and database.c record facts on the item (exit
 * status, lease lost) that the loop acts on.
 *
 *-------------------------------------------------------------------------
 */
#ifndef QUEUE_WORKER_H
#define QUEUE_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

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
#define READ_CHUNKS			16		/* 8 kB reads of one pipe per loop turn */
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
	bool		refused;		/* extend_lease refused a lease still ours
								 * (cancelled): kill, then release */
	bool		timed_out;		/* ran past --timeout */
	bool		stopping;		/* killed at the end of the grace period */
	double		kill_at;		/* when SIGTERM escalates to SIGKILL */
	Buf			out;			/* stdout, minus checkpoint lines */
	Buf			line;			/* current partial stdout line */
	bool		line_long;		/* its start (over LINE_CAP) is in out already */
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
	const char *labels;			/* "a,b" for register_worker, NULL = none */
	int			concurrency;
	int			batch;			/* 0 = as many as free slots */
	long		max_items;		/* 0 = unlimited */
	double		idle_exit;		/* 0 = never */
	double		grace;
	double		poll;
	double		poll_max;
	double		heartbeat;		/* 0 = derived from the lease */
	double		timeout;		/* per-item run time limit, 0 = none */
	double		release_within; /* stopped at shutdown before this: release */
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
	long		cancelled;		/* stopped: the operator cancelled them */
	long		stale;			/* reports refused: lease no longer ours */
	long		unreported;		/* outcomes never delivered */
} Totals;

/* How a statement went (database.c). */
typedef enum
{
	Q_OK,						/* statement succeeded */
	Q_RETRY,					/* connection trouble: retry after reconnect */
	Q_FAIL						/* SQL error: retrying will not help */
} QStatus;

/* queue-worker.c: the state every phase reads */
extern Options opt;
extern Totals totals;
extern Item *items;
extern int	nitems;				/* slots allocated */
extern PGconn *conn;			/* NULL while disconnected */
extern bool shutting_down;
extern double grace_until;
extern double lease_secs;		/* lease length used for scheduling */
extern char worker_name[256];
extern const char *progname;

int			count_state(ItemState st);
void		item_free(Item *it);
Item	   *item_slot(void);

/* util.c */
double		now_mono(void);
void		log_msg(const char *fmt,...) __attribute__((format(printf, 1, 2)));
void		die_usage(const char *fmt,...) __attribute__((format(printf, 1, 2), noreturn));
void	   *xmalloc(size_t n);
void	   *xrealloc(void *p, size_t n);
char	   *xstrdup(const char *s);
void		buf_append(Buf *b, const char *data, size_t n, size_t cap);
void		buf_append_tail(Buf *b, const char *data, size_t n, size_t cap);
void		buf_free(Buf *b);
void		sanitize_utf8(char *s, size_t len);

/* options.c */
void		parse_args(int argc, char **argv);
extern char **exec_argv;		/* --exec split into words, when it needs no shell */

/* json.c */
bool		json_valid(const char *s);
bool		json_object_starts_with_key(const char *s, size_t len, const char *key);

/* database.c */
void		startup_checks(void);
QStatus		run_query(const char *what, const char *sql, int nparams,
					  const char *const *values, PGresult **res, char *sqlstate);
double		reconnect_at(void);
bool		try_connect(void);
bool		ensure_registered(void);
bool		worker_registered(void);
double		registration_retry_at(void);
void		disconnect(const char *why);
int			claim(int want, char *sqlstate);
bool		item_send_checkpoints(Item *it);
bool		item_report(Item *it);
bool		extend_leases(void);

/* child.c */
extern int	sigpipe_fds[2];
void		setup_signals(void);
void		start_guardian(void);
const char *signal_name(int sig);
bool		item_start(Item *it);
void		item_kill(Item *it, int sig);
bool		item_read(Item *it, int *fdp, bool is_stdout);
void		item_decide(Item *it);
void		reap_children(void);

#endif							/* QUEUE_WORKER_H */
