/*-------------------------------------------------------------------------
 *
 * validate.c
 *		Argument checks shared by every SQL-callable function.
 *
 * Each rule of the public contract is checked in one place here, so the
 * message, SQLSTATE and hint for a given mistake are the same whichever
 * function it was made in.  Checks run before anything is written: a
 * rejected call changes nothing.
 *
 * src/validate.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/xact.h"
#include "access/toast_compression.h"
#include "access/toast_internals.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

#include "queue.h"

PG_FUNCTION_INFO_V1(queue_check_name_sql);

/*
 * Is this a valid queue name?  ^[a-z][a-z0-9_]{0,46}$, so that the NOTIFY
 * channel queue_<name> fits in NAMEDATALEN.
 */
static inline bool
queue_name_is_valid(const char *name, int len)
{
	if (len < 1 || len > QUEUE_NAME_MAXLEN)
		return false;
	if (!(name[0] >= 'a' && name[0] <= 'z'))
		return false;
	for (int i = 1; i < len; i++)
	{
		char		c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
			return false;
	}
	return true;
}

/*
 * queue_check_name
 *		Validate a queue name argument and return it as a C string.
 */
char *
queue_check_name(Datum name_datum, bool isnull)
{
	text	   *t;
	char	   *name;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("queue_name must not be null")));

	t = DatumGetTextPP(name_datum);
	name = text_to_cstring(t);
	if (!queue_name_is_valid(name, (int) strlen(name)) ||
		(int) strlen(name) != (int) VARSIZE_ANY_EXHDR(t))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid queue name \"%s\"", name),
				 errdetail("A queue name is 1 to %d characters: a lower-case letter, then lower-case letters, digits or underscores.",
						   QUEUE_NAME_MAXLEN),
				 errhint("Use a name matching ^[a-z][a-z0-9_]{0,46}$, for example \"invoices\".")));
	return name;
}

/*
 * queue._check_name(queue_name text) returns text
 *
 * SQL face of queue_check_name for the PL/pgSQL functions.
 */
Datum
queue_check_name_sql(PG_FUNCTION_ARGS)
{
	char	   *name = queue_check_name(PG_GETARG_DATUM(0), PG_ARGISNULL(0));

	PG_RETURN_TEXT_P(cstring_to_text(name));
}

void
queue_check_not_null(bool isnull, const char *argname)
{
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname)));
}

void
queue_check_priority(int32 priority)
{
	if (priority < QUEUE_PRIORITY_MIN || priority > QUEUE_PRIORITY_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("priority %d is out of range", priority),
				 errhint("Priorities run from %d (most urgent) to %d.",
						 QUEUE_PRIORITY_MIN, QUEUE_PRIORITY_MAX)));
}

/*
 * queue_check_batch_length
 *		A batch argument holds at most QUEUE_BATCH_ARRAY_MAX elements, so
 *		that one call's work stays bounded.
 */
void
queue_check_batch_length(int nelems, const char *argname)
{
	if (nelems > QUEUE_BATCH_ARRAY_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s has %d elements, more than the limit of %d",
						argname, nelems, QUEUE_BATCH_ARRAY_MAX),
				 errhint("Split the batch into calls of at most %d elements.",
						 QUEUE_BATCH_ARRAY_MAX)));
}

/*
 * queue_check_one_dimensional
 *		An array argument that lists one element per item or pair is
 *		one-dimensional: a two-dimensional one is a caller's mistake.
 */
void
queue_check_one_dimensional(ArrayType *arr, const char *argname)
{
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", argname)));
}

/*
 * queue_check_no_null_elements
 *		A one-dimensional array argument whose every element stands for a
 *		value that is required (an item id, a lease token) has no NULL
 *		element: the first one is 22004, named by its position from 1, as
 *		enqueue_batch names payloads[i].
 */
void
queue_check_no_null_elements(ArrayType *arr, const char *argname, const char *hint)
{
	bits8	   *bitmap = ARR_NULLBITMAP(arr);
	int			n = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));

	if (bitmap == NULL)
		return;
	for (int i = 0; i < n; i++)
	{
		if ((bitmap[i / 8] & (1 << (i % 8))) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s[%d] must not be null", argname, i + 1),
					 hint ? errhint("%s", hint) : 0));
	}
}

/*
 * The one rule of every size bound: a value of `size` bytes over `limit`
 * is 54000, naming the argument, the limit and what to do instead.
 */
static inline void
check_size(Size size, Size limit, const char *argname, const char *limit_name,
		   const char *hint)
{
	if (size > limit)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is %zu bytes, larger than %s (%zu)",
						argname, size, limit_name, limit),
				 errhint("%s", hint)));
}

/*
 * queue_check_jsonb_size
 *		A jsonb value stored with an item (payload, result, progress after
 *		merging) is no larger than queue.max_payload_bytes, counted as
 *		pg_column_size counts the value given.
 */
void
queue_check_jsonb_size(Datum value, const char *argname)
{
	check_size(toast_datum_size(value), (Size) queue_max_payload_bytes, argname,
			   "queue.max_payload_bytes",
			   "Store large documents elsewhere and keep a reference to them in the queue.");
}

/*
 * queue_check_text_size
 *		A text stored with an item (keys, error texts, reasons, notes) is
 *		at most QUEUE_TEXT_MAX_BYTES long.
 */
void
queue_check_text_size(Datum value, const char *argname)
{
	check_size(toast_raw_datum_size(value) - VARHDRSZ, QUEUE_TEXT_MAX_BYTES, argname,
			   "the limit for texts",
			   "Keep long texts elsewhere and pass an excerpt or a reference.");
}

/*
 * queue_check_text_bytes
 *		The bound on texts for a list of them stored as a whole (an item's
 *		requires): `bytes` is the length of its texts together, separators
 *		and the array's own header not counted, so that a list of one
 *		label is bounded exactly as that label would be.
 */
void
queue_check_text_bytes(Size bytes, const char *argname)
{
	check_size(bytes, QUEUE_TEXT_MAX_BYTES, argname,
			   "the limit for texts",
			   "Keep long texts elsewhere and pass an excerpt or a reference.");
}

/*
 * queue_check_key_size
 *		A key (dedup_key, group_key, limit_key) is a text stored with an item,
 *		and also an entry of the indexes that find its holder, its group or
 *		its limit.  A btree entry holds about 2.7 kB, the key compressed as
 *		the index would compress it (index_form_tuple, with the default
 *		method): a key over QUEUE_KEY_INDEX_MAX_BYTES once compressed is
 *		refused here, naming the argument, rather than by the index with a
 *		message about its own internals.
 */
void
queue_check_key_size(Datum value, const char *argname)
{
	struct varlena *raw;
	Size		stored;
	bool		compressed = false;

	queue_check_text_size(value, argname);
	raw = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(value));
	stored = VARSIZE_ANY_EXHDR(raw);
	/* only a key too long as it is can fit by compressing */
	if (stored > QUEUE_KEY_INDEX_MAX_BYTES && !VARATT_IS_SHORT(raw))
	{
		Datum		c = toast_compress_datum(PointerGetDatum(raw), InvalidCompressionMethod);

		if (DatumGetPointer(c) != NULL)
		{
			stored = VARSIZE(DatumGetPointer(c)) - VARHDRSZ;
			compressed = true;
			pfree(DatumGetPointer(c));
		}
	}
	if (stored > QUEUE_KEY_INDEX_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 compressed ?
				 errmsg("%s is %zu bytes, %zu once compressed, more than an index entry holds (%d)",
						argname, (Size) VARSIZE_ANY_EXHDR(raw), stored,
						QUEUE_KEY_INDEX_MAX_BYTES) :
				 errmsg("%s is %zu bytes and does not compress, more than an index entry holds (%d)",
						argname, (Size) VARSIZE_ANY_EXHDR(raw), QUEUE_KEY_INDEX_MAX_BYTES),
				 errdetail("A key is also an index entry: at most 64 kB, and at most %d bytes once compressed.",
						   QUEUE_KEY_INDEX_MAX_BYTES),
				 errhint("Use a shorter key, for example a hash of the long one (md5(key)).")));
}

/*
 * queue_check_dedup_key
 *		A dedup_key is a key (queue_check_key_size) and never empty: ''
 *		would make every item given it one item, the way a caller that
 *		means "no key" least expects (22023; NULL is no key).
 */
void
queue_check_dedup_key(Datum value, const char *argname)
{
	if (toast_raw_datum_size(value) == VARHDRSZ)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", argname),
				 errhint("Pass NULL for an item without a key.")));
	queue_check_key_size(value, argname);
}

/*
 * queue_check_payload
 *		A payload must be present and within queue.max_payload_bytes.
 */
void
queue_check_payload(Datum payload, const char *argname)
{
	queue_check_jsonb_size(payload, argname);
}

/*
 * queue_interval_seconds
 *		An interval as seconds, months counted as 30 days.
 */
double
queue_interval_seconds(const Interval *iv)
{
	return (double) iv->time / USECS_PER_SEC +
		(double) iv->day * SECS_PER_DAY +
		(double) iv->month * DAYS_PER_MONTH * SECS_PER_DAY;
}

/*
 * queue_check_interval_bound
 *		Durations are at most QUEUE_INTERVAL_MAX_YEARS (months of 30 days,
 *		as interval comparison counts them), so that every time computed
 *		from one is a valid timestamp; the queue settings have the same
 *		bound (queue._check_settings).
 */
void
queue_check_interval_bound(Interval *iv, const char *argname)
{
	if (queue_interval_seconds(iv) >
		(double) QUEUE_INTERVAL_MAX_YEARS * MONTHS_PER_YEAR * DAYS_PER_MONTH * SECS_PER_DAY)
	{
		char	   *s = DatumGetCString(DirectFunctionCall1(interval_out,
															IntervalPGetDatum(iv)));

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be at most %d years, not \"%s\"",
						argname, QUEUE_INTERVAL_MAX_YEARS, s),
				 errhint("Durations are bounded so that every time computed from them is a valid timestamp.")));
	}
}

/*
 * queue_check_run_at
 *		A run_at (enqueue, enqueue_batch, release) is a time that comes:
 *		'infinity' would leave the item scheduled for ever, looking like a
 *		held one to the claim index.  '-infinity' is a time in the past.
 *		The last day of PostgreSQL's range is not a run_at either: its
 *		first instant is where group members waiting behind their head
 *		are parked (FLOW_PARKED), so an item due then or later would be
 *		counted as one of them (queued, needing a worker) while scheduled.
 */
void
queue_check_run_at(TimestampTz run_at)
{
	if (TIMESTAMP_IS_NOEND(run_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("run_at must not be infinity"),
				 errhint("An item due at 'infinity' would never run; pass a time, or park the item with queue.hold().")));
	if (run_at >= FLOW_PARKED_TS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("run_at %s is past the latest time an item can be scheduled for",
						timestamptz_to_str(run_at)),
				 errhint("Pass a time before 294276-12-31 00:00:00+00, or park the item with queue.hold().")));
}

/*
 * queue_check_positive_interval
 *		Durations such as a lease must be longer than zero, and bounded.
 */
void
queue_check_positive_interval(Interval *iv, const char *argname)
{
	if (queue_interval_seconds(iv) <= 0)
	{
		char	   *s = DatumGetCString(DirectFunctionCall1(interval_out,
															IntervalPGetDatum(iv)));

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive, not \"%s\"", argname, s)));
	}
	queue_check_interval_bound(iv, argname);
}

PG_FUNCTION_INFO_V1(queue_check_payload_sql);
PG_FUNCTION_INFO_V1(queue_check_text_sql);
PG_FUNCTION_INFO_V1(queue_check_jsonb_sql);
PG_FUNCTION_INFO_V1(queue_check_key_sql);
PG_FUNCTION_INFO_V1(queue_check_worker_sql);

/*
 * queue_check_worker
 *		A worker name is present (22004), not empty (22023) and at most
 *		QUEUE_WORKER_MAX_BYTES long (54000): it is a key of the worker
 *		registry and of every lease, so a name is kept short.
 */
void
queue_check_worker(Datum worker, bool isnull)
{
	queue_check_not_null(isnull, "worker");
	if (VARSIZE_ANY_EXHDR(DatumGetTextPP(worker)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("worker must not be empty"),
				 errhint("Name the bot, for example 'bot-07'.")));
	check_size(toast_raw_datum_size(worker) - VARHDRSZ, QUEUE_WORKER_MAX_BYTES, "worker",
			   "the limit for worker names",
			   "Name the bot with a short name, for example its host and process id.");
}

/*
 * queue._check_worker(worker text) returns text
 *
 * The worker-name rules for the SQL functions; returns the name.
 */
Datum
queue_check_worker_sql(PG_FUNCTION_ARGS)
{
	queue_check_worker(PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	PG_RETURN_DATUM(PG_GETARG_DATUM(0));
}

/*
 * queue._check_payload(payload jsonb) returns void
 *
 * The payload rules of enqueue (present, within queue.max_payload_bytes)
 * for the SQL functions that create items (replay).
 */
Datum
queue_check_payload_sql(PG_FUNCTION_ARGS)
{
	queue_check_not_null(PG_ARGISNULL(0), "payload");
	queue_check_payload(PG_GETARG_DATUM(0), "payload");
	PG_RETURN_VOID();
}

/*
 * queue._check_text(value text, argname text) returns void
 *
 * The bound on texts stored with an item (64 kB) for the SQL functions;
 * a NULL value passes.
 */
Datum
queue_check_text_sql(PG_FUNCTION_ARGS)
{
	if (!PG_ARGISNULL(0))
		queue_check_text_size(PG_GETARG_DATUM(0),
							  PG_ARGISNULL(1) ? "text" : text_to_cstring(PG_GETARG_TEXT_PP(1)));
	PG_RETURN_VOID();
}

/*
 * queue._check_jsonb(value jsonb, argname text) returns void
 *
 * The bound on jsonb values (queue.max_payload_bytes) for the SQL
 * functions that store one besides a payload (register_worker's info);
 * a NULL value passes.
 */
Datum
queue_check_jsonb_sql(PG_FUNCTION_ARGS)
{
	if (!PG_ARGISNULL(0))
		queue_check_jsonb_size(PG_GETARG_DATUM(0),
							   PG_ARGISNULL(1) ? "value" : text_to_cstring(PG_GETARG_TEXT_PP(1)));
	PG_RETURN_VOID();
}

/*
 * queue._check_key(value text, argname text) returns void
 *
 * The bounds on keys (64 kB, and what an index entry holds) for the SQL
 * functions that store one (set_limit, schedule); a NULL value passes.
 */
Datum
queue_check_key_sql(PG_FUNCTION_ARGS)
{
	if (!PG_ARGISNULL(0))
		queue_check_key_size(PG_GETARG_DATUM(0),
							 PG_ARGISNULL(1) ? "key" : text_to_cstring(PG_GETARG_TEXT_PP(1)));
	PG_RETURN_VOID();
}

/*
 * queue_check_writable
 *		A call that writes, made in a read-only transaction (a hot standby,
 *		default_transaction_read_only, BEGIN READ ONLY): 25006 naming the
 *		call, as PostgreSQL names a refused statement, instead of whichever
 *		statement inside the call first tried to write ("cannot execute
 *		SELECT ..." for a complete).  Called once the arguments, the queue
 *		and the caller's access have been checked.
 */
void
queue_check_writable(FunctionCallInfo fcinfo)
{
	if (XactReadOnly)
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot execute queue.%s() in a read-only transaction",
						get_func_name(fcinfo->flinfo->fn_oid)),
				 errhint("Call it in a read-write transaction, on the primary server if this one is a hot standby.")));
}
