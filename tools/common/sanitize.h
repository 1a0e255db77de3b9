/*-------------------------------------------------------------------------
 *
 * sanitize.h
 *		Make text from the database harmless for a terminal.
 *
 * Shared by queue-worker and queue-top: every string either tool prints
 * passes through term_sanitize first.
 *
 *-------------------------------------------------------------------------
 */
#ifndef QUEUE_TOOLS_SANITIZE_H
#define QUEUE_TOOLS_SANITIZE_H

#include <stddef.h>

/* The longest output one input byte can become ("\u009b" for 2 bytes). */
#define TERM_SANITIZE_GROWTH	4

size_t		term_sanitize(char *dst, size_t dstsize, const char *src, size_t srclen);
char	   *term_sanitize_dup(const char *src, size_t srclen);

#endif							/* QUEUE_TOOLS_SANITIZE_H */
