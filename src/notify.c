/*-------------------------------------------------------------------------
 *
 * notify.c
 *		NOTIFY queue_<name> for committed enqueues, without serialising
 *		concurrent producers' commits.
 *
 * PostgreSQL serialises the commits of all transactions that sent a
 * notification: PreCommit_Notify takes one cluster-wide lock and holds it
 * past the commit record's WAL flush.  Notifying from every enqueue would
 * therefore let only one producer commit at a time, losing group commit.
 *
 * Without shared memory (the library not in shared_preload_libraries) the
 * enqueue notifies in its own transaction, as NOTIFY would.
 *
 * With it, the enqueue only remembers the queue.  Before commit, if that
 * lock is free and no notifier runs, the transaction notifies by itself
 * (one producer at a time costs nothing).  If another transaction holds
 * the lock, the queue is handed to a notifier background worker of the
 * database instead: after the commit is visible the producer marks the
 * queue pending and sets the notifier's latch (unless the queue was
 * pending already), and the notifier sends the NOTIFY from a transaction
 * of its own with synchronous_commit off (a lost wakeup costs a poll,
 * never an item).  The notifier folds pending queues into one transaction
 * and sends at most every NOTIFIER_MIN_GAP_MS, so that a stream of
 * enqueues costs a few notifying transactions a second instead of one per
 * commit; while it runs, producers hand over even when the lock is free.
 * It is started on demand, one per database, and exits after a short idle
 * time so that it never keeps DROP DATABASE waiting.
 *
 * Either way a listener receives NOTIFY queue_<name> once the enqueue's
 * transaction is committed, never for a rolled-back one, and at most once
 * per transaction (notifications of several transactions may fold into
 * one when they go through the notifier).
 *
 * The shared state (notifier slots, channel slots) is protected by one
 * LWLock, since its users loop over the slots.  A slot freed by a
 * notifier's exit may serve another database a moment later, so every
 * slot carries a generation, bumped whenever it is taken or freed: a
 * producer that reserved a notifier before its commit settles the
 * reservation, and marks its channels, only if the generations it saw are
 * still current.  A slot whose worker could not be registered is freed at
 * once, and one whose worker never came up is taken over by the next
 * database that needs a slot.  A producer's exit settles its reservation
 * (a detach callback), as does the notifier's exit for its slot.
 *
 * src/notify.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/async.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "queue.h"

#define NOTIFY_MAX_NOTIFIERS	8		/* databases served at once */
#define NOTIFY_MAX_CHANNELS		512		/* (database, queue) pairs known */
#define NOTIFY_MAX_LOCAL		64		/* distinct queues per transaction */
#define NOTIFIER_IDLE_EXIT_MS	2000	/* under DROP DATABASE's 5 s wait */
#define NOTIFIER_RESTART_MS		10000	/* retry a start that never came up */
#define NOTIFIER_MIN_GAP_MS		10		/* between two sends of a notifier */

#define NOTIFY_TRANCHE			"queue notify"

/* One notifier background worker, serving one database. */
typedef struct NotifierSlot
{
	Oid			dbid;			/* InvalidOid: slot free */
	uint64		generation;		/* bumped when the slot is taken or freed */
	pid_t		pid;			/* 0 until the worker runs */
	Latch	   *latch;			/* the worker's MyLatch, while it runs */
	int			reserved;		/* producers between pre-commit and commit */
	TimestampTz requested;		/* when a start was last requested */
} NotifierSlot;

/* A queue's channel, and whether a notification is owed on it. */
typedef struct ChannelSlot
{
	Oid			dbid;			/* InvalidOid: slot free */
	uint64		generation;		/* bumped when the slot is taken or freed */
	bool		pending;
	char		name[QUEUE_NAME_MAXLEN + 1];
} ChannelSlot;

typedef struct NotifyShared
{
	LWLock	   *lock;			/* protects everything below */
	uint64		next_generation;	/* source of slot generations */
	NotifierSlot notifiers[NOTIFY_MAX_NOTIFIERS];
	ChannelSlot channels[NOTIFY_MAX_CHANNELS];
} NotifyShared;

/* A queue this transaction owes a notification, and how it will be sent. */
typedef struct LocalPending
{
	char		name[QUEUE_NAME_MAXLEN + 1];
	int			nestlevel;		/* subtransaction that added it */
	int			channel;		/* ChannelSlot index once handed over */
	uint64		channel_generation; /* ... and its generation then */
} LocalPending;

void		queue_notifier_main(Datum main_arg);

int			queue_notify_handoff = QUEUE_NOTIFY_HANDOFF_AUTO;
static NotifyShared *notify_shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static LocalPending local_pending[NOTIFY_MAX_LOCAL];
static int	local_count = 0;
static int	local_notifier = -1;	/* NotifierSlot reserved at pre-commit */
static uint64 local_generation = 0;	/* ... and its generation then */
static bool callbacks_registered = false;

static void
notify_channel(const char *queue_name)
{
	char		channel[NAMEDATALEN];

	snprintf(channel, sizeof(channel), "queue_%s", queue_name);
	Async_Notify(channel, "");
}

static void
notify_local_now(void)
{
	for (int i = 0; i < local_count; i++)
		notify_channel(local_pending[i].name);
	local_count = 0;
}

/*
 * Is the lock that serialises notifying commits free?  If so it is now
 * ours, as PreCommit_Notify would take it a moment later anyway.
 */
static bool
notify_lock_free(void)
{
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, InvalidOid, 0);
	return LockAcquire(&tag, AccessExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

/* Register the database's notifier; false if no worker slot is free. */
static bool
request_notifier_start(void)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "queue");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "queue_notifier_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "queue notifier for database %u", MyDatabaseId);
	snprintf(worker.bgw_type, BGW_MAXLEN, "queue notifier");
	worker.bgw_main_arg = ObjectIdGetDatum(MyDatabaseId);
	worker.bgw_notify_pid = 0;

	return RegisterDynamicBackgroundWorker(&worker, &handle);
}

static uint64
new_generation(void)
{
	return ++notify_shared->next_generation;
}

/* Free a notifier's slot and its database's channels; lock held. */
static void
notifier_release_locked(int slot)
{
	NotifierSlot *n = &notify_shared->notifiers[slot];

	for (int c = 0; c < NOTIFY_MAX_CHANNELS; c++)
	{
		ChannelSlot *ch = &notify_shared->channels[c];

		if (ch->dbid == n->dbid)
		{
			ch->dbid = InvalidOid;
			ch->generation = new_generation();
		}
	}
	n->dbid = InvalidOid;
	n->generation = new_generation();
	n->pid = 0;
	n->latch = NULL;
	n->reserved = 0;
}

/*
 * A start that never came up (the worker failed before it ran, or its
 * database went away): the slot may serve another database.
 */
static inline bool
notifier_start_stale(const NotifierSlot *n, TimestampTz now)
{
	return n->dbid != InvalidOid && n->pid == 0 &&
		TimestampDifferenceExceeds(n->requested, now, NOTIFIER_RESTART_MS);
}

/*
 * Does a notifier seem to run for this database?  Read without the lock,
 * so that a producer of a database without one (the common case of few
 * producers) does not take it twice: a stale answer only picks the other
 * path, and hand_over_to_notifier checks again under the lock.
 */
static bool
notifier_seems_running(void)
{
	for (int i = 0; i < NOTIFY_MAX_NOTIFIERS; i++)
	{
		volatile NotifierSlot *n = &notify_shared->notifiers[i];

		if (n->dbid == MyDatabaseId && n->pid != 0)
			return true;
	}
	return false;
}

/*
 * Hand this transaction's queues to the database's notifier.  Returns false
 * (nothing reserved) when there is no running notifier or no channel slot,
 * and the caller notifies directly.  Without one, a notifier is started for
 * the next transactions unless only_if_running.
 */
static bool
hand_over_to_notifier(bool only_if_running)
{
	TimestampTz now = GetCurrentTimestamp();
	int			notifier = -1;
	int			free_notifier = -1;
	int			stale_notifier = -1;
	int			start = -1;
	uint64		start_generation = 0;
	bool		ok = true;

	LWLockAcquire(notify_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < NOTIFY_MAX_NOTIFIERS; i++)
	{
		NotifierSlot *n = &notify_shared->notifiers[i];

		if (n->dbid == MyDatabaseId)
			notifier = i;
		else if (n->dbid == InvalidOid && free_notifier < 0)
			free_notifier = i;
		else if (notifier_start_stale(n, now) && stale_notifier < 0)
			stale_notifier = i;
	}
	if (only_if_running &&
		(notifier < 0 || notify_shared->notifiers[notifier].pid == 0))
	{
		LWLockRelease(notify_shared->lock);
		return false;
	}
	if (notifier < 0)
	{
		int			slot = free_notifier >= 0 ? free_notifier : stale_notifier;

		if (slot >= 0)
		{
			NotifierSlot *n = &notify_shared->notifiers[slot];

			if (n->dbid != InvalidOid)
				notifier_release_locked(slot);	/* a start that never came up */
			n->dbid = MyDatabaseId;
			n->generation = new_generation();
			n->pid = 0;
			n->latch = NULL;
			n->reserved = 0;
			n->requested = now;
			start = slot;
			start_generation = n->generation;
		}
		ok = false;
	}
	else if (notify_shared->notifiers[notifier].pid == 0)
	{
		NotifierSlot *n = &notify_shared->notifiers[notifier];

		if (TimestampDifferenceExceeds(n->requested, now, NOTIFIER_RESTART_MS))
		{
			n->requested = now;
			start = notifier;
			start_generation = n->generation;
		}
		ok = false;
	}

	/* find or claim a channel slot for every queue */
	for (int i = 0; ok && i < local_count; i++)
	{
		int			found = -1;
		int			free_slot = -1;

		for (int c = 0; c < NOTIFY_MAX_CHANNELS; c++)
		{
			ChannelSlot *ch = &notify_shared->channels[c];

			if (ch->dbid == MyDatabaseId && strcmp(ch->name, local_pending[i].name) == 0)
			{
				found = c;
				break;
			}
			if (ch->dbid == InvalidOid && free_slot < 0)
				free_slot = c;
		}
		if (found < 0 && free_slot >= 0)
		{
			ChannelSlot *ch = &notify_shared->channels[free_slot];

			ch->dbid = MyDatabaseId;
			ch->generation = new_generation();
			ch->pending = false;
			strlcpy(ch->name, local_pending[i].name, sizeof(ch->name));
			found = free_slot;
		}
		if (found < 0)
			ok = false;
		else
		{
			local_pending[i].channel = found;
			local_pending[i].channel_generation = notify_shared->channels[found].generation;
		}
	}
	if (ok)
	{
		notify_shared->notifiers[notifier].reserved++;
		local_notifier = notifier;
		local_generation = notify_shared->notifiers[notifier].generation;
	}
	LWLockRelease(notify_shared->lock);

	/* no free worker slot: free ours, and notify directly until one is */
	if (start >= 0 && !request_notifier_start())
	{
		LWLockAcquire(notify_shared->lock, LW_EXCLUSIVE);
		if (notify_shared->notifiers[start].generation == start_generation &&
			notify_shared->notifiers[start].pid == 0)
			notifier_release_locked(start);
		LWLockRelease(notify_shared->lock);
	}
	return ok;
}

/*
 * After commit (or abort, or the producer's exit): settle the reservation,
 * and after a commit mark the queues pending and wake the notifier.  A
 * queue already pending needs no wake-up: the notifier has not collected
 * it yet, and whoever marked it woke the notifier.  A slot whose
 * generation changed meanwhile serves someone else now: its notifier
 * exited, and with it the notifications owed (polls cover them).
 */
static void
release_to_notifier(bool committed)
{
	Latch	   *latch = NULL;

	LWLockAcquire(notify_shared->lock, LW_EXCLUSIVE);
	if (notify_shared->notifiers[local_notifier].generation == local_generation)
	{
		NotifierSlot *n = &notify_shared->notifiers[local_notifier];

		n->reserved--;
		if (committed)
		{
			for (int i = 0; i < local_count; i++)
			{
				ChannelSlot *ch = &notify_shared->channels[local_pending[i].channel];

				if (ch->generation == local_pending[i].channel_generation &&
					!ch->pending)
				{
					ch->pending = true;
					latch = n->latch;
				}
			}
		}
	}
	LWLockRelease(notify_shared->lock);

	if (latch)
		SetLatch(latch);
	local_notifier = -1;
	local_count = 0;
}

/* A producer's exit between pre-commit and commit settles its reservation. */
static void
producer_detach(int code, Datum arg)
{
	if (local_notifier >= 0)
		release_to_notifier(false);
}

static void
notify_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (local_count == 0)
				break;
			if (queue_notify_handoff == QUEUE_NOTIFY_HANDOFF_NEVER)
				notify_local_now();
			else if (queue_notify_handoff == QUEUE_NOTIFY_HANDOFF_AUTO)
			{
				/* a running notifier folds a stream of enqueues */
				if (!(notifier_seems_running() && hand_over_to_notifier(true)) &&
					(notify_lock_free() || !hand_over_to_notifier(false)))
					notify_local_now();
			}
			else if (!hand_over_to_notifier(false))
				notify_local_now();
			break;
		case XACT_EVENT_PRE_PREPARE:
			/* PostgreSQL refuses to PREPARE after NOTIFY: let it say so */
			notify_local_now();
			break;
		case XACT_EVENT_COMMIT:
			if (local_notifier >= 0)
				release_to_notifier(true);
			local_count = 0;
			break;
		case XACT_EVENT_ABORT:
			if (local_notifier >= 0)
				release_to_notifier(false);
			local_count = 0;
			break;
		default:
			break;
	}
}

static void
notify_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			kept = 0;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	for (int i = 0; i < local_count; i++)
	{
		if (local_pending[i].nestlevel >= level)
		{
			if (event == SUBXACT_EVENT_ABORT_SUB)
				continue;		/* the enqueue was rolled back */
			local_pending[i].nestlevel = level - 1;
		}
		local_pending[kept++] = local_pending[i];
	}
	local_count = kept;
}

/*
 * queue_notify_on_commit
 *		Have NOTIFY queue_<name> sent when this transaction commits.
 */
void
queue_notify_on_commit(const char *queue_name)
{
	int			level;

	if (notify_shared == NULL)
	{
		notify_channel(queue_name);
		return;
	}

	level = GetCurrentTransactionNestLevel();
	for (int i = 0; i < local_count; i++)
		if (strcmp(local_pending[i].name, queue_name) == 0 &&
			local_pending[i].nestlevel <= level)
			return;

	if (local_count >= NOTIFY_MAX_LOCAL)
	{
		/* many queues in one transaction: the plain path is fine */
		notify_channel(queue_name);
		return;
	}
	if (!callbacks_registered)
	{
		RegisterXactCallback(notify_xact_callback, NULL);
		RegisterSubXactCallback(notify_subxact_callback, NULL);
		before_shmem_exit(producer_detach, (Datum) 0);
		callbacks_registered = true;
	}
	strlcpy(local_pending[local_count].name, queue_name, sizeof(local_pending[0].name));
	local_pending[local_count].nestlevel = level;
	local_pending[local_count].channel = -1;
	local_count++;
}

/*
 * The notifier's exit on an error or a signal: free its slot unless the
 * idle exit already did (the slot may serve a new notifier by now).
 * Notifications still pending are lost; listeners' polls cover them.
 */
static void
notifier_detach(int code, Datum arg)
{
	int			slot = DatumGetInt32(arg);

	LWLockAcquire(notify_shared->lock, LW_EXCLUSIVE);
	if (notify_shared->notifiers[slot].pid == MyProcPid)
		notifier_release_locked(slot);
	LWLockRelease(notify_shared->lock);
}

/*
 * queue_notifier_main
 *		Background worker: send the notifications producers handed over
 *		for one database, then exit once idle.
 */
void
queue_notifier_main(Datum main_arg)
{
	Oid			dbid = DatumGetObjectId(main_arg);
	int			slot = -1;
	TimestampTz last_work;
	char		names[NOTIFY_MAX_CHANNELS][QUEUE_NAME_MAXLEN + 1];

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	if (notify_shared == NULL)
		proc_exit(0);

	LWLockAcquire(notify_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < NOTIFY_MAX_NOTIFIERS; i++)
		if (notify_shared->notifiers[i].dbid == dbid &&
			notify_shared->notifiers[i].pid == 0)
		{
			slot = i;
			notify_shared->notifiers[i].pid = MyProcPid;
			notify_shared->notifiers[i].latch = MyLatch;
			break;
		}
	LWLockRelease(notify_shared->lock);
	if (slot < 0)
		proc_exit(0);			/* another notifier already serves it */

	before_shmem_exit(notifier_detach, Int32GetDatum(slot));
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	pgstat_report_appname("queue notifier");

	/* a notification is a wake-up call, not data: never wait for a flush */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);

	last_work = GetCurrentTimestamp();
	for (;;)
	{
		int			n = 0;
		bool		idle_exit = false;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		LWLockAcquire(notify_shared->lock, LW_EXCLUSIVE);
		for (int c = 0; c < NOTIFY_MAX_CHANNELS; c++)
		{
			ChannelSlot *ch = &notify_shared->channels[c];

			if (ch->dbid == dbid && ch->pending)
			{
				ch->pending = false;
				strlcpy(names[n++], ch->name, sizeof(names[0]));
			}
		}
		if (n == 0 && notify_shared->notifiers[slot].reserved == 0 &&
			TimestampDifferenceExceeds(last_work, GetCurrentTimestamp(),
									   NOTIFIER_IDLE_EXIT_MS))
		{
			/* leave under the lock, so no producer hands over to us now */
			notifier_release_locked(slot);
			idle_exit = true;
		}
		LWLockRelease(notify_shared->lock);

		if (idle_exit)
			proc_exit(0);

		if (n > 0)
		{
			SetCurrentStatementStartTimestamp();
			StartTransactionCommand();
			for (int i = 0; i < n; i++)
				notify_channel(names[i]);
			CommitTransactionCommand();
			pgstat_report_activity(STATE_IDLE, NULL);
			last_work = GetCurrentTimestamp();

			/*
			 * Let the next enqueues gather before sending again: a stream of
			 * them costs a few transactions a second, not one per commit.
			 * Wake-ups meanwhile leave the latch set for the next pass.
			 */
			(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 NOTIFIER_MIN_GAP_MS, PG_WAIT_EXTENSION);
			continue;			/* more may have arrived meanwhile */
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 NOTIFIER_IDLE_EXIT_MS / 2, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

static void
notify_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(NotifyShared)));
	RequestNamedLWLockTranche(NOTIFY_TRANCHE, 1);
}

static void
notify_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	notify_shared = ShmemInitStruct("queue notify", sizeof(NotifyShared), &found);
	if (!found)
	{
		memset(notify_shared, 0, sizeof(NotifyShared));
		notify_shared->lock = &(GetNamedLWLockTranche(NOTIFY_TRANCHE))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * queue_notify_init
 *		From _PG_init: the shared state, when preloaded.
 */
void
queue_notify_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = notify_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = notify_shmem_startup;
}
