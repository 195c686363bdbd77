#!/usr/bin/env python3
"""Checks that no two modules of src/ share a name, and no two types of src/ share a name.

Modules: every file that is a module (`x.rs` is `x`, `x/mod.rs` is `x`; `lib.rs`, `main.rs` and
files pulled in with `include!`, whose names are not identifiers, are not) and every inline
`mod x { ... }` (unit-test modules, `mod tests`, are left out). Types: every `struct`, `enum`,
`union`, `trait` and type alias (`type X = ...;` outside `impl` and `trait` bodies, which hold
associated types), wherever it is defined: at the top of a file, in a function, in a test
module, in generated code. Comments and string literals are left out. Prints each shared name
with where it is defined and exits 1 when there is one.

Usage: python3 .ci/unique_names.py [src]"""
import os, re, sys
from collections import defaultdict

IDENT = re.compile(r'[A-Za-z_][A-Za-z0-9_]*\Z')


def code_only(text):
    """`text` with comments, string and character literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            i = j
        elif text.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith('/*', j): depth += 1; j += 2
                elif text.startswith('*/', j): depth -= 1; j += 2
                else: j += 1
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not re.match(r'\w', text[i - 1])):
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c == '"' or (c == 'b' and text.startswith('b"', i) and (i == 0 or not re.match(r'\w', text[i - 1]))):
            j = i + (2 if c == 'b' else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append(re.sub(r'[^\n]', ' ', text[i:j + 1]))
            i = j + 1
        elif c == "'" and (m := re.compile(r"b?'(?:\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'").match(text, i)):
            out.append(' ' * (m.end() - i))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return ''.join(out)


DEF = re.compile(r'(?:pub(?:\s*\([^)]*\))?\s+)?(?:unsafe\s+)?(struct|enum|union|trait|type|mod)\s+([A-Za-z_][A-Za-z0-9_]*)')


def definitions(code):
    """(kind, name, line, inside an impl or trait body, inline module) for each definition."""
    found = []
    stack = []  # per open brace: whether it opened an impl or trait body
    start = 0   # where the current item's text starts (after the last `;`, `{` or `}`)
    for i, c in enumerate(code):
        if c in ';{}':
            head = code[start:i]
            stripped = re.sub(r'#!?\[[^\]]*\]', ' ', head).strip()
            m = DEF.match(stripped)
            if m:
                at = re.search(rf'\b{m.group(1)}\s+{m.group(2)}\b', head)
                line = code.count('\n', 0, start + (at.start() if at else 0)) + 1
                found.append((m.group(1), m.group(2), line, bool(stack and stack[-1]), c == '{'))
            if c == '{':
                stack.append(bool(re.match(r'(?:unsafe\s+)?impl\b|(?:pub(?:\s*\([^)]*\))?\s+)?(?:unsafe\s+)?trait\b', stripped)))
            elif c == '}' and stack:
                stack.pop()
            start = i + 1
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else 'src'
    modules = defaultdict(list)
    types = defaultdict(list)
    files = 0
    for d, dirs, fs in os.walk(root):
        dirs.sort()
        for f in sorted(fs):
            if not f.endswith('.rs'):
                continue
            files += 1
            path = os.path.join(d, f)
            rel = os.path.relpath(path, root)
            stem = f[:-3]
            if stem == 'mod':
                name = os.path.basename(d)
            elif stem in ('lib', 'main') and d == root:
                name = None
            else:
                name = stem
            if name is not None and IDENT.match(name):
                modules[name].append(rel)
            for kind, item, line, in_impl, inline in definitions(code_only(open(path).read())):
                where = f'{rel}:{line}'
                if kind == 'mod':
                    if inline and item != 'tests':
                        modules[item].append(f'{where} (inline)')
                elif not (kind == 'type' and in_impl):
                    types[item].append(f'{kind} {where}')
    shared = 0
    for what, names in (('module', modules), ('type', types)):
        for name in sorted(names):
            if len(names[name]) > 1:
                shared += 1
                print(f'{what} {name}: {", ".join(names[name])}')
    print(f'{files} files, {len(modules)} module names, {len(types)} type names, {shared} shared')
    sys.exit(1 if shared else 0)


main()
