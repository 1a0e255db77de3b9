#!/usr/bin/env python3
"""prom_compare.py SCRAPED EXPECTED -- compare two Prometheus text expositions.

SCRAPED is what postgres_exporter served, EXPECTED what queue.prometheus()
returned.  Only families named queue_* are compared.  Labels are compared as
Prometheus stores them: a label with an empty value is no label, and the
exporter's own label `server` is left out.  Families must agree in TYPE and
HELP, samples in name, labels and value (queue_oldest_queued_age_seconds
within 10 s: the clock runs between the two reads).  Prints one line per
difference and a summary; exits 1 if there is any.
"""
import math
import re
import sys

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(path):
    types, helps, samples = {}, {}, {}
    for line in open(path, encoding='utf-8'):
        line = line.rstrip('\n')
        if line.startswith('# TYPE '):
            _, _, name, kind = line.split(' ', 3)
            types[name] = kind
        elif line.startswith('# HELP '):
            _, _, name, text = line.split(' ', 3)
            helps[name] = text
        elif line and not line.startswith('#'):
            m = SAMPLE.match(line)
            if not m:
                raise SystemExit('unparsable line in %s: %r' % (path, line))
            name, labels, value = m.groups()
            if not name.startswith('queue_'):
                continue
            lab = tuple(sorted((k, v) for k, v in LABEL.findall(labels or '')
                               if v != '' and k != 'server'))
            samples[(name, lab)] = float(value)
    keep = lambda d: {k: v for k, v in d.items() if k.startswith('queue_')}
    return keep(types), keep(helps), samples


def same(name, a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if name == 'queue_oldest_queued_age_seconds':
        return abs(a - b) <= 10
    return a == b


def main():
    st, sh, ss = parse(sys.argv[1])
    et, eh, es = parse(sys.argv[2])
    diffs = []
    for fam in sorted(set(st) | set(et)):
        if st.get(fam) != et.get(fam):
            diffs.append('TYPE %s: scraped %s, expected %s' % (fam, st.get(fam), et.get(fam)))
        if sh.get(fam) != eh.get(fam):
            diffs.append('HELP %s: scraped %r, expected %r' % (fam, sh.get(fam), eh.get(fam)))
    for key in sorted(set(ss) | set(es)):
        name, lab = key
        shown = '%s{%s}' % (name, ','.join('%s="%s"' % kv for kv in lab))
        if key not in ss:
            diffs.append('missing from the scrape: %s %s' % (shown, es[key]))
        elif key not in es:
            diffs.append('not in prometheus(): %s %s' % (shown, ss[key]))
        elif not same(name, ss[key], es[key]):
            diffs.append('value of %s: scraped %s, expected %s' % (shown, ss[key], es[key]))
    for d in diffs:
        print(d)
    print('compared %d families, %d samples, %d differences' % (len(et), len(es), len(diffs)))
    return 1 if diffs else 0


if __name__ == '__main__':
    sys.exit(main())
