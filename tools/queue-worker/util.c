/*-------------------------------------------------------------------------
 *
 * util.c
 *		queue-worker's small helpers: clock, log, allocation, buffers.
 *
 * Every line queue-worker writes to its log goes through log_msg, which
 * makes the text safe for a terminal first (see tools/common/sanitize.h):
 * worker names, server messages and the commands' output are data and
 * may hold control characters.
 *
 *-------------------------------------------------------------------------
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "sanitize.h"
#include "worker.h"

double
now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void
log_msg(const char *fmt,...)
{
	va_list		ap;
	struct timeval tv;
	struct tm	tm;
	char		stamp[32];

	char		small[1024];
	char	   *msg = small;
	char	   *name;
	char	   *safe;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t) n >= sizeof(small))
	{
		msg = xmalloc(n + 1);
		va_start(ap, fmt);
		vsnprintf(msg, n + 1, fmt, ap);
		va_end(ap);
	}
	name = term_sanitize_dup(worker_name, strlen(worker_name));
	safe = term_sanitize_dup(msg, n);

	gettimeofday(&tv, NULL);
	localtime_r(&tv.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(stderr, "%s.%03d %s %s: %s\n", stamp, (int) (tv.tv_usec / 1000),
			progname, name && name[0] ? name : "-", safe ? safe : "(out of memory)");
	free(safe);
	free(name);
	if (msg != small)
		free(msg);
}

void
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

void *
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

void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (p == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		exit(1);
	}
	return p;
}

char *
xstrdup(const char *s)
{
	size_t		n = strlen(s);
	char	   *p = xmalloc(n + 1);

	memcpy(p, s, n + 1);
	return p;
}

void
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
		b->data = xrealloc(b->data, ncap);
		b->cap = ncap;
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
}

/* Keep only the last `cap` bytes (for stderr). */
void
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

void
buf_free(Buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/*
 * Is the n-byte sequence at s, whose lead byte promised n bytes, valid
 * UTF-8 as PostgreSQL judges it (pg_utf8_islegal): no overlong forms, no
 * surrogates (CESU-8, Java's modified UTF-8), nothing past U+10FFFF?
 */
static bool
utf8_legal(const unsigned char *s, int n)
{
	for (int k = 1; k < n; k++)
		if ((s[k] & 0xC0) != 0x80)
			return false;
	if (n == 3 && s[0] == 0xE0 && s[1] < 0xA0)
		return false;			/* overlong */
	if (n == 3 && s[0] == 0xED && s[1] > 0x9F)
		return false;			/* a surrogate, U+D800..U+DFFF */
	if (n == 4 && s[0] == 0xF0 && s[1] < 0x90)
		return false;			/* overlong */
	if (n == 4 && s[0] == 0xF4 && s[1] > 0x8F)
		return false;			/* past U+10FFFF */
	return true;
}

/*
 * Make text safe to send as a PostgreSQL text value: replace NUL bytes
 * and every byte of a sequence the server would refuse as UTF-8 with '?'.
 * Works in place.
 */
void
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
		if (n == 0 || i + n > len || !utf8_legal((unsigned char *) s + i, n))
		{
			s[i++] = '?';
			continue;
		}
		i += n;
	}
}

