/*-------------------------------------------------------------------------
 *
 * sanitize.c
 *		Make text from the database harmless for a terminal.
 *
 * Worker names, pause reasons, alert messages, error texts and a
 * command's output are data: anyone allowed to register a worker or fail
 * an item chooses them.  Printed raw, an ESC or a C1 control starts a
 * terminal escape sequence (a title change, a screen clear, an OSC 52
 * clipboard write), and a newline forges a log line.  So both tools
 * print such text only through term_sanitize, which shows every control
 * character visibly and keeps everything else:
 *
 *   C0 controls and DEL       \xNN   (\x1b for ESC, \x07 for BEL, \x0a for
 *                                     a newline inside a value)
 *   C1 controls (U+0080-009F) \u00NN (written as two UTF-8 bytes)
 *   bidirectional overrides   \u202e and the like (they reorder what
 *                                     follows on the screen)
 *   a byte that is not valid UTF-8   \xNN
 *
 * A backslash itself is kept, so the output is for reading, not for
 * parsing back.
 *
 *-------------------------------------------------------------------------
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sanitize.h"

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if none. */
static int
utf8_len(const unsigned char *s, size_t n, unsigned int *cp)
{
	int			len;
	unsigned int c;

	if (s[0] < 0x80)
	{
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		len = 2, c = s[0] & 0x1F;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		len = 3, c = s[0] & 0x0F;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		len = 4, c = s[0] & 0x07;
	else
		return 0;
	if ((size_t) len > n)
		return 0;
	for (int i = 1; i < len; i++)
	{
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3F);
	}
	/* overlong forms, surrogates, beyond U+10FFFF */
	if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
		(c >= 0xD800 && c <= 0xDFFF))
		return 0;
	*cp = c;
	return len;
}

/* Code points that change how the following text is drawn. */
static bool
is_format_control(unsigned int cp)
{
	return (cp >= 0x80 && cp <= 0x9F) ||	/* C1 */
		(cp >= 0x202A && cp <= 0x202E) ||	/* bidi embeddings, overrides */
		(cp >= 0x2066 && cp <= 0x2069) ||	/* bidi isolates */
		cp == 0x2028 || cp == 0x2029;	/* line and paragraph separators */
}

/*
 * Copy srclen bytes of src to dst (dstsize bytes, always NUL-terminated)
 * with every control character written visibly.  An escape that does not
 * fit is left out whole.  Returns the length written.
 */
size_t
term_sanitize(char *dst, size_t dstsize, const char *src, size_t srclen)
{
	const unsigned char *s = (const unsigned char *) src;
	size_t		o = 0;
	size_t		i = 0;

	if (dstsize == 0)
		return 0;
	while (i < srclen)
	{
		unsigned int cp = 0;
		int			len = utf8_len(s + i, srclen - i, &cp);
		char		esc[16];
		const char *piece;
		size_t		plen;

		if (len == 0 || cp < 0x20 || cp == 0x7F)
		{
			/* a C0 control, DEL, or a byte that is not UTF-8 */
			snprintf(esc, sizeof(esc), "\\x%02x", s[i]);
			piece = esc;
			plen = 4;
			len = 1;
		}
		else if (is_format_control(cp))
		{
			snprintf(esc, sizeof(esc), "\\u%04x", cp);
			piece = esc;
			plen = 6;
		}
		else
		{
			piece = (const char *) s + i;
			plen = len;
		}
		if (o + plen >= dstsize)
			break;
		memcpy(dst + o, piece, plen);
		o += plen;
		i += len;
	}
	dst[o] = '\0';
	return o;
}

/* The same into a new malloc'd string (NULL when out of memory). */
char *
term_sanitize_dup(const char *src, size_t srclen)
{
	size_t		size = srclen * TERM_SANITIZE_GROWTH + 1;
	char	   *dst = malloc(size);

	if (dst != NULL)
		term_sanitize(dst, size, src, srclen);
	return dst;
}
