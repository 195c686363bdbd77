#!/usr/bin/env python3
"""Checks that no two files of src/ import each other, directly or round a loop.

The graph has an edge A -> B when file A names an item of file B's module: `crate::...`,
`super::...` and `self::...` paths (resolved to the longest module prefix that is a file), and a
parent's `child::item` uses. Unit-test modules (`#[cfg(test)] mod tests` at the end of a file)
and comments are left out. Prints each loop with its edges and exits 1 when there is one.

Usage: python3 .ci/import_cycles.py [src]"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else 'src'
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)[:-3].split(os.sep)
            if rel in (['lib'], ['main']): mod = ()
            elif rel[-1] == 'mod': mod = tuple(rel[:-1])
            else: mod = tuple(rel)
            if 'proto' in rel and rel[-1] != 'mod' and '.' in rel[-1]: continue
            files[mod] = p
def owner(path):
    # the longest module prefix that is a file
    for i in range(len(path), -1, -1):
        if tuple(path[:i]) in files: return tuple(path[:i])
    return ()
def strip_comments(s):
    s = re.sub(r'//[^\n]*', '', s)
    return s
edges = {m: set() for m in files}
for mod, p in files.items():
    src = strip_comments(open(p).read())
    # cut #[cfg(test)] mod tests { ... } at the end (tests may use anything)
    i = src.find('#[cfg(test)]\nmod tests')
    if i >= 0: src = src[:i]
    is_dir = p.endswith('mod.rs') or p.endswith('lib.rs') or p.endswith('main.rs')
    # expand `use a::{b, c::{d}}` roughly: collect path tokens
    for m in re.finditer(r'\b((?:crate|super|self)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*|\{[^;]*?\}))*)', src):
        text = m.group(1)
        if src[max(0, m.start() - 4):m.start()] in ('pub(', '(in ') or text in ('crate', 'self', 'super'):
            continue
        parts = re.split(r'::', text)
        # resolve
        if parts[0] == 'crate': base = []; rest = parts[1:]
        else:
            base = list(mod)
            rest = parts
            while rest and rest[0] in ('super', 'self'):
                if rest[0] == 'super': base = base[:-1]
                rest = rest[1:]
        # brace groups: take each alternative's first segment
        alts = [rest]
        if rest and rest[-1].startswith('{'):
            inner = rest[-1][1:-1]
            alts = [rest[:-1] + [a.strip().split('::')[0]] for a in re.split(r',', inner) if a.strip()]
        for a in alts:
            segs = base + [x for x in a if x and not x.startswith('{')]
            o = owner(segs)
            if o != mod and o in files:
                edges[mod].add(o)
    # a parent using its child's items through the child's name (mod x; x::f())
    for m in re.finditer(r'(?<![:\w])([a-z_][a-z0-9_]*)::[A-Za-z_]', src):
        child = mod + (m.group(1),)
        if child in files and child != mod:
            edges[mod].add(child)
# drop the lib root's edges (it only declares modules)
edges[()] = set()
# Tarjan
index = {}; low = {}; stack = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v] = low[v] = c[0]; c[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        sccs.append(comp)
for v in files:
    if v not in index: sc(v)
bad = [s for s in sccs if len(s) > 1]
name = lambda m: os.path.relpath(files[m], root)
for s in bad:
    print('cycle:', ' '.join(sorted(name(m) for m in s)))
    for m in s:
        for w in sorted(edges[m]):
            if w in s: print('   ', name(m), '->', name(w))
print(f'{len(files)} files, {sum(len(e) for e in edges.values())} edges, {len(bad)} cycles')
sys.exit(1 if bad else 0)
