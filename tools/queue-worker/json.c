/*-------------------------------------------------------------------------
 *
 * json.c
 *		A small JSON syntax checker (RFC 8259) for queue-worker.
 *
 * It tells a JSON result from plain text and finds checkpoint lines; it
 * builds nothing.  The server parses the text again as jsonb, so this
 * only has to agree with jsonb on what is valid (jsonb refuses \u0000).
 * Every function reads a NUL-terminated string, except
 * json_object_starts_with_key, which reads only the counted slice it is
 * given (a line inside a read buffer, not terminated).
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#include "worker.h"

static const char *json_value(const char *p, int depth);

static const char *
json_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

static const char *
json_string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	for (;;)
	{
		unsigned char c = (unsigned char) *p;

		if (c == '"')
			return p + 1;
		if (c < 0x20)
			return NULL;
		if (c == '\\')
		{
			p++;
			if (*p == 'u')
			{
				for (int i = 1; i <= 4; i++)
					if (!isxdigit((unsigned char) p[i]))
						return NULL;
				/* jsonb refuses \u0000 */
				if (!strncmp(p + 1, "0000", 4))
					return NULL;
				p += 5;
			}
			else if (*p && strchr("\"\\/bfnrt", *p))
				p++;
			else
				return NULL;
		}
		else
			p++;
	}
}

static const char *
json_number(const char *p)
{
	if (*p == '-')
		p++;
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		while (isdigit((unsigned char) *p))
			p++;
	else
		return NULL;
	if (*p == '.')
	{
		p++;
		if (!isdigit((unsigned char) *p))
			return NULL;
		while (isdigit((unsigned char) *p))
			p++;
	}
	if (*p == 'e' || *p == 'E')
	{
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!isdigit((unsigned char) *p))
			return NULL;
		while (isdigit((unsigned char) *p))
			p++;
	}
	return p;
}

static const char *
json_value(const char *p, int depth)
{
	if (depth > 500)
		return NULL;
	p = json_ws(p);
	switch (*p)
	{
		case '{':
			p = json_ws(p + 1);
			if (*p == '}')
				return p + 1;
			for (;;)
			{
				p = json_string(json_ws(p));
				if (p == NULL)
					return NULL;
				p = json_ws(p);
				if (*p++ != ':')
					return NULL;
				p = json_value(p, depth + 1);
				if (p == NULL)
					return NULL;
				p = json_ws(p);
				if (*p == '}')
					return p + 1;
				if (*p++ != ',')
					return NULL;
			}
		case '[':
			p = json_ws(p + 1);
			if (*p == ']')
				return p + 1;
			for (;;)
			{
				p = json_value(p, depth + 1);
				if (p == NULL)
					return NULL;
				p = json_ws(p);
				if (*p == ']')
					return p + 1;
				if (*p++ != ',')
					return NULL;
			}
		case '"':
			return json_string(p);
		case 't':
			return strncmp(p, "true", 4) ? NULL : p + 4;
		case 'f':
			return strncmp(p, "false", 5) ? NULL : p + 5;
		case 'n':
			return strncmp(p, "null", 4) ? NULL : p + 4;
		default:
			return json_number(p);
	}
}

bool
json_valid(const char *s)
{
	const char *p = json_value(s, 0);

	return p != NULL && *json_ws(p) == '\0';
}

/*
 * Does the slice s[0..len) start like a JSON object whose first key is
 * `key`: optional whitespace, '{', whitespace, "key"?  Reads nothing
 * beyond the slice.
 */
bool
json_object_starts_with_key(const char *s, size_t len, const char *key)
{
	const char *p = s;
	const char *end = s + len;
	size_t		klen = strlen(key);

	while (p < end && isspace((unsigned char) *p))
		p++;
	if (p >= end || *p++ != '{')
		return false;
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	if ((size_t) (end - p) < klen + 2 || p[0] != '"' || p[klen + 1] != '"')
		return false;
	return memcmp(p + 1, key, klen) == 0;
}
