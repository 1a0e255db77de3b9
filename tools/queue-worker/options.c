/*-------------------------------------------------------------------------
 *
 * options.c
 *		queue-worker's command line: parsing, validation and --help.
 *
 * parse_args fills the Options in `opt` and exits with status 2 and a
 * message naming the fix for any invalid setting.  It also decides
 * whether --exec needs a shell (split_simple_command).  Nothing here
 * touches the database or starts a process.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker.h"

/* the characters of a plain word, one that means the same to a shell */
#define PATH_WORD_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-+=:,@%"

char	  **exec_argv;			/* --exec split into words, when it needs no shell */

static void split_simple_command(void);
static void check_program(void);

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

/* --labels: non-empty words separated by single commas. */
static bool
valid_labels(const char *s)
{
	size_t		n = strlen(s);

	if (n == 0 || n > 1000 || s[0] == ',' || s[n - 1] == ',' || strstr(s, ",,"))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char) s[i] < 0x21 || s[i] == '"' || s[i] == '\\' || s[i] == 0x7f)
			return false;
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
		   "      --labels L1,L2      what this worker can do (capability routing): it is handed\n"
		   "                          only items whose requires are all among its labels\n"
		   "  -m, --max-items N       claim at most N items, then exit when they are done\n"
		   "  -i, --idle-exit DUR     exit after DUR without work (e.g. 30s)\n"
		   "  -g, --grace DUR         on SIGTERM/SIGINT, time running items get to finish (default 5s)\n"
		   "      --release-within DUR  a command stopped at the end of the grace period is released\n"
		   "                          (attempt given back) if it ran less than DUR, else failed\n"
		   "                          transiently with WORKER_STOPPED (default 1min)\n"
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
		   "then stop them (SIGTERM to the command's process group, SIGKILL 3 s later); a command\n"
		   "that still exits 0 or 75 reports as usual, the others are released (see\n"
		   "--release-within).  A second signal ends the grace period.\n"
		   "Exit status: 0 normal end, 1 runtime failure, 2 usage error.\n");
}

void
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
		{"release-within", required_argument, NULL, 5},
		{"labels", required_argument, NULL, 6},
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
			case 6:
				if (!valid_labels(optarg))
					die_usage("invalid --labels \"%s\": give labels separated by commas, such as gpu,eu-west", optarg);
				opt.labels = optarg;
				break;
			case 5:
				if (!parse_duration(optarg, &opt.release_within))
					die_usage("invalid --release-within \"%s\": give a duration such as 1min", optarg);
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
	split_simple_command();
	check_program();
}

/*
 * When the command's first word names a program by a path (./process.sh,
 * /opt/bot/run), that program must exist and be executable now: a mistake
 * in the set-up stops the worker (exit 2) before it claims anything,
 * instead of failing every item of the queue one after the other.  A
 * first word that is a bare name or shell syntax is left to the shell.
 */
static void
check_program(void)
{
	const char *word = opt.exec + strspn(opt.exec, " \t\n");
	size_t		len = strcspn(word, " \t\n");
	char	   *path;
	struct stat st;
	int			err = 0;

	if (len == 0 || memchr(word, '/', len) == NULL || memchr(word, '=', len) != NULL ||
		strspn(word, PATH_WORD_CHARS) < len)
		return;
	path = xmalloc(len + 1);
	memcpy(path, word, len);
	path[len] = '\0';
	if (stat(path, &st) != 0)
		err = errno;
	else if (S_ISDIR(st.st_mode))
		err = EISDIR;
	else if (access(path, X_OK) != 0)
		err = errno;
	if (err != 0)
	{
		fprintf(stderr, "%s: cannot run %s: %s\n", progname, path, strerror(err));
		exit(2);
	}
	free(path);
}

/*
 * A command made only of plain words (no quotes, variables, redirections,
 * globs or other shell syntax) whose first word is a path, such as
 * "./process.sh --fast", means the same with or without a shell, so it is
 * run directly: one fork and exec less per item.  Anything else goes
 * through /bin/sh -c.
 */
void
split_simple_command(void)
{
	const char *allowed = PATH_WORD_CHARS " ";
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
