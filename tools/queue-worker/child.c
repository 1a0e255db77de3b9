/*-------------------------------------------------------------------------
 *
 * child.c
 *		queue-worker's command side: processes, pipes, signals, outcomes.
 *
 * Each command runs as a child in its own process group (the group id
 * is the child's pid), with the payload on stdin and stdout and stderr
 * on non-blocking pipes the main loop polls.  item_kill signals the
 * whole group, so a pipeline or a script's own children stop with it;
 * when the command's first process exits, whatever it left running in
 * its group is killed too.  If the worker itself dies, PR_SET_PDEATHSIG
 * kills the first process and the guardian (a process forked at start)
 * kills the rest of every group.
 * Signals to the worker are turned into bytes on a self-pipe so the loop
 * handles them in order.  item_decide turns an exit status into the
 * report an item owes; the database side sends it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE				/* memfd_create */
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#include <sys/prctl.h>
#endif
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker.h"

static void guardian_watch(pid_t pgid);
static void guardian_forget(pid_t pgid);
static void decide_stopped(Item *it);

int			sigpipe_fds[2] = {-1, -1};
static int	guardian_fd = -1;	/* write end of the pipe to the guardian */

static void
set_cloexec_nonblock(int fd)
{
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/*
 * A file for the payload the command reads on stdin: in memory where the
 * system has memfd_create, so that a read-only /tmp (a container's
 * read-only root file system) does not stop the worker; else tmpfile().
 */
static FILE *
payload_file(void)
{
#ifdef MFD_CLOEXEC
	int			fd = memfd_create("queue-worker-payload", MFD_CLOEXEC);

	if (fd >= 0)
	{
		FILE	   *f = fdopen(fd, "w+");

		if (f)
			return f;
		close(fd);
	}
#endif
	return tmpfile();
}

/* Close the descriptors of fds that are open (not -1). */
static void
close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* Start the command for one waiting item. */
bool
item_start(Item *it)
{
	/* the command's stdout, stderr and exec-failure pipes; -1 = not open */
	int			fds[6] = {-1, -1, -1, -1, -1, -1};
	int		   *outp = &fds[0];
	int		   *errp = &fds[2];
	int		   *execp = &fds[4];
	FILE	   *in;
	int			exec_errno = 0;
	pid_t		pid;
	pid_t		parent;

	/* one line: the payload JSON (jsonb prints no newline) and a newline */
	in = payload_file();
	if (in == NULL || fputs(it->payload, in) == EOF || fputc('\n', in) == EOF ||
		fflush(in) != 0 || fseek(in, 0, SEEK_SET) != 0)
	{
		log_msg("item %s: cannot stage the payload for the command: %s",
				it->id, strerror(errno));
		if (in)
			fclose(in);
		return false;
	}
	/* the exec pipe is closed by a successful exec, else carries errno */
	if (pipe(outp) != 0 || pipe(errp) != 0 || pipe2(execp, O_CLOEXEC) != 0)
	{
		log_msg("item %s: pipe: %s", it->id, strerror(errno));
		close_fds(fds, (int) (sizeof(fds) / sizeof(fds[0])));
		fclose(in);
		return false;
	}

	parent = getpid();
	pid = fork();
	if (pid < 0)
	{
		log_msg("item %s: fork: %s", it->id, strerror(errno));
		close_fds(fds, (int) (sizeof(fds) / sizeof(fds[0])));
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
		close(execp[0]);
		if (exec_argv)
			execvp(exec_argv[0], exec_argv);
		else
			execl("/bin/sh", "sh", "-c", opt.exec, (char *) NULL);
		/* tell the worker why (it logs it); exit as a shell would */
		exec_errno = errno;
		if (write(execp[1], &exec_errno, sizeof(exec_errno)) != sizeof(exec_errno))
			exec_errno = 0;
		_exit(127);
	}

	/* parent */
	setpgid(pid, pid);			/* no race with the child's own call */
	fclose(in);
	close(outp[1]);
	close(errp[1]);
	close(execp[1]);

	/*
	 * A program that cannot be run (removed or made unexecutable after the
	 * worker started: a deploy) is no failure of the item: it is given
	 * back like a fork that failed, and the worker waits a poll.
	 */
	if (read(execp[0], &exec_errno, sizeof(exec_errno)) == sizeof(exec_errno))
	{
		log_msg("item %s: cannot run %s: %s", it->id,
				exec_argv ? exec_argv[0] : "/bin/sh", strerror(exec_errno));
		close(execp[0]);
		close(outp[0]);
		close(errp[0]);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		return false;
	}
	close(execp[0]);
	guardian_watch(pid);
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
	if (len < LINE_CAP && json_object_starts_with_key(line, len, "checkpoint"))
	{
		char	   *copy = xmalloc(len + 1);

		memcpy(copy, line, len);
		copy[len] = '\0';
		sanitize_utf8(copy, len);
		if (json_valid(copy))
		{
			it->checkpoints = xrealloc(it->checkpoints,
									   sizeof(char *) * (it->ncheckpoints + 1));
			it->checkpoints[it->ncheckpoints++] = copy;
			return;
		}
		free(copy);
	}
	buf_append(&it->out, line, len, STDOUT_CAP);
	buf_append(&it->out, "\n", 1, STDOUT_CAP);
	if (opt.verbose)
		log_msg("item %s stdout: %.*s", it->id, (int) len, line);
}

/*
 * Read what a child wrote; returns false at EOF.  At most READ_CHUNKS
 * chunks per call: a command that writes faster than the worker handles
 * its output (--verbose logs every line) would otherwise keep the worker
 * here for good, deaf to --timeout, lease extensions and signals.  What is
 * left wakes the next poll() at once.
 */
bool
item_read(Item *it, int *fdp, bool is_stdout)
{
	char		chunk[8192];
	ssize_t		n;
	int			chunks = 0;

	for (;;)
	{
		if (chunks++ >= READ_CHUNKS)
			return true;
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
							/* too long for a checkpoint: plain output, and the line goes on */
							buf_append(&it->out, it->line.data, it->line.len, STDOUT_CAP);
							it->line.len = 0;
							it->line_long = true;
						}
						break;
					}
					if (it->line_long)
					{
						buf_append(&it->out, it->line.data, it->line.len, STDOUT_CAP);
						buf_append(&it->out, s, nl - s, STDOUT_CAP);
						buf_append(&it->out, "\n", 1, STDOUT_CAP);
						it->line.len = 0;
						it->line_long = false;
					}
					else if (it->line.len > 0)
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
				/* one log line per line (a line cut by a read's end: two) */
				for (const char *s = chunk, *e = chunk + n; opt.verbose && s < e;)
				{
					const char *nl = memchr(s, '\n', e - s);
					const char *end = nl ? nl : e;

					if (end > s)
						log_msg("item %s stderr: %.*s", it->id, (int) (end - s), s);
					s = end + (nl ? 1 : 0);
				}
			}
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return true;
		if (n < 0 && errno == EINTR)
			continue;
		/* EOF or error */
		if (is_stdout && it->line_long)
		{
			buf_append(&it->out, it->line.data, it->line.len, STDOUT_CAP);
			buf_append(&it->out, "\n", 1, STDOUT_CAP);
			it->line.len = 0;
			it->line_long = false;
		}
		else if (is_stdout && it->line.len > 0)
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

const char *
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

/*
 * A command stopped at shutdown that did not finish.  Released (attempt
 * given back) when it had run less than --release-within; a longer one is
 * failed transiently (WORKER_STOPPED), so the attempt counts and an item
 * that always outlives the grace period ends as a dead letter after
 * max_attempts instead of being run again at every deploy.
 */
static void
decide_stopped(Item *it)
{
	double		ran = it->finished_at - it->started_at;
	char		msg[200];

	if (ran < opt.release_within)
	{
		it->outcome = OUT_RELEASE;
		return;
	}
	snprintf(msg, sizeof(msg),
			 "stopped at worker shutdown after running %.0f s (--release-within %.0f s): the attempt counts",
			 ran, opt.release_within);
	it->outcome = OUT_TRANSIENT;
	it->error = xstrdup(msg);
	it->error_code = xstrdup("WORKER_STOPPED");
}

/*
 * Did the command end of a signal that stops the worker gracefully
 * (SIGTERM, SIGINT, SIGHUP), or exit 128 plus one of them, as shells and
 * JVMs report a death by it?
 */
static bool
died_of_stop_signal(int st)
{
	int			sig = 0;

	if (WIFSIGNALED(st))
		sig = WTERMSIG(st);
	else if (WIFEXITED(st) && WEXITSTATUS(st) > 128)
		sig = WEXITSTATUS(st) - 128;
	return sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
}

/* The child exited and its pipes are closed: decide the report. */
void
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
	/*
	 * Cancelled: hand the item back, unless the command had already
	 * finished its work (exit 0 before our SIGKILL): a complete that comes
	 * first still wins.
	 */
	if (it->refused && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
	{
		it->outcome = OUT_RELEASE;
		free(tail);
		return;
	}
	/*
	 * Stopped at the end of the grace period: a command that still
	 * finished (exit 0 or 75) reports like any other; one that died of our
	 * signal, or gave up with another status, did not finish its work.
	 */
	if (it->stopping && !it->timed_out && !(WIFEXITED(st) &&
		(WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == EXIT_TEMPFAIL)))
	{
		decide_stopped(it);
		free(tail);
		return;
	}
	/*
	 * Stopped with the worker: while it shuts down, a command that died of
	 * a stop signal got it from whoever stops the worker (systemd's
	 * control-group stop, `kill 0` in a script, a process group signalled
	 * by hand) and did not fail: it ends like one stopped at the end of the
	 * grace period.
	 */
	if (shutting_down && !it->timed_out && died_of_stop_signal(st))
	{
		decide_stopped(it);
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

void
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

/* Kill the item's process group. */
void
item_kill(Item *it, int sig)
{
	if (it->pid > 0 && !it->reaped)
	{
		kill(-it->pid, sig);
		kill(it->pid, sig);
	}
}

void
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
				/* what the command left running goes with it */
				kill(-pid, SIGKILL);
				guardian_forget(pid);
				break;
			}
	}
}

/*
 * The guardian: a small process forked at start that knows the process
 * group of every running command.  PR_SET_PDEATHSIG reaches only a
 * command's first process, so when the worker dies (even by SIGKILL) the
 * rest of a pipeline or a script's own children would live on; the
 * guardian sees its pipe from the worker close and kills every group it
 * still knows.  It ignores the signals that stop the worker gracefully.
 * Records are one int each: a group id to watch, or its negation once
 * the group is gone.
 */
static void
guardian_main(int fd)
{
	pid_t	   *groups = NULL;
	size_t		n = 0,
				cap = 0;
	int			rec;
	int			devnull = open("/dev/null", O_RDWR);

	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGCHLD, SIG_DFL);
	if (devnull >= 0)
	{
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(devnull, 2);
	}
	for (;;)
	{
		ssize_t		r = read(fd, &rec, sizeof(rec));

		if (r < 0 && errno == EINTR)
			continue;
		if (r != (ssize_t) sizeof(rec))
			break;				/* the worker is gone */
		if (rec > 0)
		{
			if (n == cap)
			{
				cap = cap ? cap * 2 : 64;
				groups = realloc(groups, cap * sizeof(pid_t));
				if (groups == NULL)
					break;
			}
			groups[n++] = rec;
		}
		else
			for (size_t i = 0; i < n; i++)
				if (groups[i] == -rec)
				{
					groups[i] = groups[--n];
					break;
				}
	}
	for (size_t i = 0; groups && i < n; i++)
		kill(-groups[i], SIGKILL);
	_exit(0);
}

void
start_guardian(void)
{
	int			p[2];
	pid_t		pid;

	if (pipe(p) != 0)
	{
		log_msg("cannot start the guardian of the commands' processes: pipe: %s", strerror(errno));
		return;
	}
	pid = fork();
	if (pid < 0)
	{
		log_msg("cannot start the guardian of the commands' processes: fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return;
	}
	if (pid == 0)
	{
		close(p[1]);
		if (sigpipe_fds[0] >= 0)
		{
			close(sigpipe_fds[0]);
			close(sigpipe_fds[1]);
		}
		guardian_main(p[0]);
	}
	close(p[0]);
	fcntl(p[1], F_SETFD, FD_CLOEXEC);
	guardian_fd = p[1];
}

static void
guardian_send(int rec)
{
	if (guardian_fd >= 0 && write(guardian_fd, &rec, sizeof(rec)) != (ssize_t) sizeof(rec))
	{
		log_msg("lost the guardian of the commands' processes: %s", strerror(errno));
		close(guardian_fd);
		guardian_fd = -1;
	}
}

static void
guardian_watch(pid_t pgid)
{
	guardian_send((int) pgid);
}

static void
guardian_forget(pid_t pgid)
{
	guardian_send(-(int) pgid);
}
