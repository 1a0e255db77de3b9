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
 * Design.  One process, one libpq connection, one poll() loop.  This
 * file owns the loop and the item table: every item the worker holds
 * has a slot in `items` and stays there until its outcome is known to
 * the database, so a report that fails because the connection died is
 * sent again, with the same lease token, after reconnecting.  Each turn
 * of the loop starts waiting items, services the database (reports,
 * checkpoints, leases, heartbeat), enforces --timeout and the grace
 * period, claims, then sleeps in poll() until a pipe, a signal, a
 * notification or the next deadline wakes it.  See worker.h for the
 * other files and what each owns.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker.h"

/* The main loop's own schedule and counters. */
typedef struct Loop
{
	double		next_claim;		/* when to ask dequeue again */
	double		next_heartbeat;	/* when to call heartbeat again */
	double		last_work;		/* when the worker last held an item */
	double		last_ask;		/* when a claim last came back empty or failed */
	double		poll_delay;		/* current polling interval */
	long		claimed_budget; /* items --max-items still allows */
	bool		fatal_error;	/* claiming is impossible: wind down */
	bool		notified;		/* a notification asked for a claim */
	bool		paused;			/* the last empty claim found the queue paused */
	bool		poll_failed;	/* poll() failed: wind down without it */
	int			exit_code;
} Loop;

Options		opt = {
	.dsn = "",
	.concurrency = 1,
	.grace = 5.0,
	.poll = 5.0,
	.poll_max = 30.0,
	.release_within = 60.0,
	.listen = true,
};
Totals		totals;
Item	   *items;
int			nitems;
bool		shutting_down;
double		grace_until;
double		lease_secs;
char		worker_name[256];
const char *progname = "queue-worker";

static double start_time;

/* ---------------------------------------------------------------------
 * the item table
 * ---------------------------------------------------------------------
 */

int
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

void
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

Item *
item_slot(void)
{
	for (int i = 0; i < nitems; i++)
		if (items[i].state == IT_FREE)
			return &items[i];
	return NULL;
}

/* The worker name: --name, else host-pid. */
static void
init_worker_name(void)
{
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
}

static void
init_items(void)
{
	nitems = opt.concurrency + (opt.batch > opt.concurrency ? opt.batch : 0);
	items = calloc(nitems, sizeof(Item));
	if (items == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		exit(1);
	}
	for (int i = 0; i < nitems; i++)
		item_free(&items[i]);
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

/* ---------------------------------------------------------------------
 * the phases of one turn of the loop
 * ---------------------------------------------------------------------
 */

/* Start waiting items in free slots. */
static void
start_waiting_items(Loop *lp)
{
	int			running = count_state(IT_RUNNING);
	bool		failed = false;

	for (int i = 0; i < nitems && running < opt.concurrency && !shutting_down; i++)
		if (items[i].state == IT_WAITING)
		{
			if (item_start(&items[i]))
				running++;
			else
			{
				/* could not even start: give the item back, budget included */
				items[i].state = IT_REPORT;
				items[i].outcome = OUT_RELEASE;
				items[i].finished_at = now_mono();
				if (opt.max_items)
					lp->claimed_budget++;
				failed = true;
			}
		}
	if (failed)
	{
		/*
		 * Claiming again at once would hand the items straight back: wait
		 * one poll interval (a process limit or memory may free up).
		 */
		lp->next_claim = now_mono() + lp->poll_delay;
		log_msg("cannot start commands; claiming again in %.1f s", lp->poll_delay);
	}
}

/* Deliver reports and checkpoints, keep leases, heartbeat. */
static void
service_database(Loop *lp)
{
	/*
	 * Back: what was enqueued while the worker was not listening sent its
	 * notification nowhere, so ask the queue now, not at the next poll.
	 */
	if (conn == NULL && now_mono() >= reconnect_at() && try_connect())
		lp->next_claim = 0;
	if (conn == NULL)
		return;
	ensure_registered();
	for (int i = 0; i < nitems && conn; i++)
	{
		if (items[i].state == IT_REPORT)
			item_report(&items[i]);
		else if (items[i].state == IT_RUNNING && items[i].ncheckpoints > 0)
			item_send_checkpoints(&items[i]);
	}
	if (conn)
		extend_leases();
	if (conn && now_mono() >= lp->next_heartbeat)
	{
		const char *vals[1] = {worker_name};
		QStatus		qs = run_query("heartbeat", "SELECT queue.heartbeat($1)", 1, vals, NULL, NULL);

		if (qs == Q_RETRY && conn)
			lp->next_heartbeat = now_mono() + 1.0;	/* a timeout: try again soon */
		else if (qs != Q_RETRY)
		{
			lp->next_heartbeat = now_mono() + opt.heartbeat;
			/*
			 * heartbeat sets the leases to the queue's lease_timeout, which
			 * may be shorter than --lease: extend them again at once
			 */
			for (int i = 0; i < nitems; i++)
				items[i].next_extend = 0;
			if (conn)
				extend_leases();
		}
	}
}

/* --timeout, the end of the grace period, SIGTERM -> SIGKILL. */
static void
enforce_deadlines(void)
{
	double		t = now_mono();

	for (int i = 0; i < nitems; i++)
	{
		Item	   *it = &items[i];

		if (it->state != IT_RUNNING || it->reaped)
			continue;
		if (opt.timeout > 0 && !it->timed_out && !it->lost && !it->refused &&
			t - it->started_at >= opt.timeout)
		{
			log_msg("item %s ran past --timeout (%.0f s); stopping the command", it->id, opt.timeout);
			it->timed_out = true;
			item_kill(it, SIGTERM);
			it->kill_at = t + KILL_WAIT;
		}
		if (shutting_down && t >= grace_until && !it->stopping && !it->lost && !it->refused)
		{
			log_msg("item %s still running at the end of the grace period; stopping it",
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
}

/* May the loop ask for more items now? */
static bool
claim_allowed(const Loop *lp)
{
	return !shutting_down && !lp->fatal_error && conn != NULL && worker_registered() &&
		count_state(IT_WAITING) == 0 && count_state(IT_RUNNING) < opt.concurrency &&
		count_held() < nitems &&
		(opt.max_items == 0 || lp->claimed_budget > 0);
}

/* After an empty claim: back off while the queue is paused. */
static void
schedule_next_poll(Loop *lp)
{
	const char *vals[1] = {opt.queue};
	PGresult   *res;

	if (run_query("checking the queue",
				  "SELECT paused FROM queue.queues WHERE queue_name = $1",
				  1, vals, &res, NULL) == Q_OK)
	{
		bool		paused = PQntuples(res) > 0 && PQgetvalue(res, 0, 0)[0] == 't';

		PQclear(res);
		lp->paused = paused;
		if (paused)
			lp->poll_delay = fmin(lp->poll_delay * 2, opt.poll_max);
		else
			lp->poll_delay = opt.poll;
	}
	lp->next_claim = now_mono() + lp->poll_delay;
}

/* Claim when due.  Returns true when items came, so the loop turns again. */
static bool
claim_step(Loop *lp)
{
	int			running = count_state(IT_RUNNING);
	int			free_slots = nitems - count_held();
	int			want = opt.batch ? opt.batch : opt.concurrency - running;
	char		sqlstate[6];
	int			got;

	if (!claim_allowed(lp) || now_mono() < lp->next_claim)
		return false;
	if (want > free_slots)
		want = free_slots;
	if (opt.max_items && want > lp->claimed_budget)
		want = (int) lp->claimed_budget;
	got = want > 0 ? claim(want, sqlstate) : 0;
	if (got > 0)
	{
		lp->claimed_budget -= got;
		lp->last_work = now_mono();
		lp->poll_delay = opt.poll;
		lp->paused = false;
		/*
		 * Ask again as soon as a slot is free: a short batch may just mean
		 * a capacity limit; only an empty one means the queue is drained.
		 */
		lp->next_claim = 0;
		return true;
	}
	/* an answer, empty or an error; a lost connection is none */
	if (got == 0 || conn != NULL)
		lp->last_ask = now_mono();
	if (got < 0 && (!strcmp(sqlstate, "42704") || !strcmp(sqlstate, "42501") ||
					!strcmp(sqlstate, "22023") || !strcmp(sqlstate, "22004")))
	{
		log_msg("cannot claim from queue \"%s\"; stopping", opt.queue);
		lp->fatal_error = true;
		lp->exit_code = 1;
		begin_shutdown(0);
		grace_until = now_mono() + opt.grace;
	}
	else if (got == 0 && conn)
		schedule_next_poll(lp);
	else
		lp->next_claim = now_mono() + lp->poll_delay;
	return false;
}

/* Should the worker stop now? */
static bool
time_to_exit(Loop *lp)
{
	int			held = count_held();

	if (held == 0)
	{
		if (shutting_down)
			return true;
		if (opt.max_items && lp->claimed_budget <= 0)
		{
			log_msg("--max-items %ld reached", opt.max_items);
			return true;
		}
		if (opt.idle_exit > 0 && now_mono() - lp->last_work >= opt.idle_exit)
		{
			/*
			 * Ask once more at the deadline before giving up: an item whose
			 * run_at or backoff came due since the last poll sends no
			 * notification, and --poll may be longer than --idle-exit.
			 * Without a connection the worker cannot ask: it waits for the
			 * database (reconnecting as usual) and asks then.
			 */
			if (!lp->fatal_error && lp->last_ask < lp->last_work + opt.idle_exit &&
				(conn == NULL || claim_allowed(lp)))
			{
				lp->next_claim = 0;
				return false;
			}
			log_msg("no work for %.0f s (--idle-exit)", opt.idle_exit);
			return true;
		}
	}
	else
		lp->last_work = now_mono();
	if (shutting_down && conn == NULL && count_state(IT_RUNNING) == 0 &&
		now_mono() >= grace_until + 5.0)
	{
		log_msg("database unreachable at shutdown; leaving %d item(s) to lease expiry", held);
		totals.unreported += held;
		return true;
	}
	return false;
}

/*
 * Collect notifications libpq has read; any of them means "claim now",
 * unless the last poll found the queue paused: a paused queue hands out
 * nothing however many items arrive, so then a notification brings the
 * next poll no nearer than --poll after the last one, and a fleet does not
 * poll a paused queue at the producers' rate.
 */
static void
take_notifications(Loop *lp)
{
	PGnotify   *nt;

	if (conn == NULL)
		return;
	while ((nt = PQnotifies(conn)) != NULL)
	{
		lp->notified = true;
		PQfreemem(nt);
	}
	if (lp->notified && lp->paused)
		lp->next_claim = fmin(lp->next_claim, lp->last_ask + opt.poll);
	else if (lp->notified)
		lp->next_claim = 0;
	lp->notified = false;
}

/* The earliest deadline the loop must wake up for. */
static double
next_wakeup(const Loop *lp)
{
	double		t = now_mono();
	double		wake = t + 60.0;

	if (claim_allowed(lp))
		wake = fmin(wake, fmax(lp->next_claim, t));
	if (conn)
		wake = fmin(wake, lp->next_heartbeat);
	if (conn && !worker_registered())
		wake = fmin(wake, fmax(registration_retry_at(), t));
	if (conn == NULL)
		wake = fmin(wake, reconnect_at());
	/* past the deadline without a connection, the reconnect is what counts */
	if (opt.idle_exit > 0 && count_held() == 0 && (conn || t < lp->last_work + opt.idle_exit))
		wake = fmin(wake, lp->last_work + opt.idle_exit);
	if (shutting_down)
		wake = fmin(wake, fmax(grace_until, t + 0.05));
	for (int i = 0; i < nitems; i++)
	{
		const Item *it = &items[i];

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
		}
		if (it->state == IT_REPORT)
			wake = fmin(wake, t + 1.0);
	}
	return wake;
}

/* Handle the self-pipe: reap children, start a shutdown. */
static void
handle_signals(void)
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

/*
 * Sleep in poll() until a pipe, a signal, the connection or the next
 * deadline wakes the loop, then handle what woke it.
 */
static void
wait_and_dispatch(Loop *lp)
{
	struct pollfd pfds[2 + 2 * MAX_CONCURRENCY];
	Item	   *owner[2 + 2 * MAX_CONCURRENCY];
	int			npfd = 0;
	int			ms;

	take_notifications(lp);
	ms = (int) ceil(fmax(0, next_wakeup(lp) - now_mono()) * 1000.0);
	for (int i = 0; i < nitems; i++)
	{
		Item	   *it = &items[i];

		if (it->state != IT_RUNNING)
			continue;
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
	pfds[npfd].fd = sigpipe_fds[0];
	pfds[npfd].events = POLLIN;
	owner[npfd++] = NULL;
	if (conn)
	{
		pfds[npfd].fd = PQsocket(conn);
		pfds[npfd].events = POLLIN;
		owner[npfd++] = NULL;
	}

	if (poll(pfds, npfd, ms) < 0 && errno != EINTR)
	{
		/*
		 * Without poll the loop still works, by looking at everything
		 * every 50 ms (the descriptors are non-blocking): stop as after
		 * SIGTERM, so running commands finish or are stopped, and every
		 * item is reported before the worker exits.
		 */
		struct timespec nap = {0, 50 * 1000 * 1000};

		if (!lp->poll_failed)
		{
			log_msg("poll: %s; stopping: nothing new is claimed, running commands get --grace to finish",
					strerror(errno));
			lp->poll_failed = true;
			lp->exit_code = 1;
			begin_shutdown(0);
		}
		nanosleep(&nap, NULL);
		for (int k = 0; k < npfd; k++)
			pfds[k].revents = POLLIN;
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
			handle_signals();
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
	take_notifications(lp);

	/*
	 * A signal that interrupted poll() (EINTR) left its byte in the pipe:
	 * take the signals in the order they came before reaping, so a
	 * command that died of the SIGTERM which also stops the worker is seen
	 * as stopped with it.  SIGCHLD may race with the pipe read; reaping is
	 * cheap.
	 */
	handle_signals();
	reap_children();
}

/* Commands that exited: drain their pipes, then decide their outcome. */
static void
finish_commands(void)
{
	double		t = now_mono();

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

static void
log_summary(void)
{
	double		secs = now_mono() - start_time;
	long		finished = totals.completed + totals.retrying + totals.dead;

	log_msg("summary: claimed %ld, completed %ld, failed %ld (retrying %ld, dead %ld), "
			"lost lease %ld, released %ld, cancelled %ld, refused as stale %ld, unreported %ld; "
			"%.1f s, %.2f items/s",
			totals.claimed, totals.completed, totals.retrying + totals.dead,
			totals.retrying, totals.dead, totals.lost, totals.released, totals.cancelled, totals.stale,
			totals.unreported, secs, secs > 0 ? finished / secs : 0.0);
}

int
main(int argc, char **argv)
{
	Loop		lp = {0};

	setvbuf(stderr, NULL, _IOLBF, 0);
	parse_args(argc, argv);
	init_worker_name();
	init_items();
	setup_signals();
	start_guardian();
	startup_checks();

	start_time = now_mono();
	lp.last_work = start_time;
	lp.next_heartbeat = start_time + opt.heartbeat;
	lp.poll_delay = opt.poll;
	lp.claimed_budget = opt.max_items;
	log_msg("consuming queue \"%s\" with up to %d command(s) at once (lease %.0f s%s%s)",
			opt.queue, opt.concurrency, lease_secs,
			opt.max_items ? ", bounded by --max-items" : "",
			opt.idle_exit > 0 ? ", bounded by --idle-exit" : "");

	/* a signal that came while starting: no claim after it */
	handle_signals();
	for (;;)
	{
		start_waiting_items(&lp);
		service_database(&lp);
		enforce_deadlines();
		if (claim_step(&lp))
			continue;
		if (time_to_exit(&lp))
			break;
		wait_and_dispatch(&lp);
		finish_commands();
	}

	log_summary();
	if (conn)
		PQfinish(conn);
	return lp.exit_code;
}
